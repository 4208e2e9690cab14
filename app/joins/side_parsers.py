"""The parser of one side of a join spec (:meth:`app.joins.spec.Side.parser`): which of the
compiled parsers of :mod:`app.inputs.parsers` reads it, with which value and key decoders
(:mod:`app.inputs.wire_formats`).

Why apart from the spec: the spec says *what* a side is; how its bytes become a flat record is
the inputs' concern, and the choice (the fast JSON path, the shaped one, a framed format, a
key compared or not) grew with every wire form of issue Z.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from app.inputs.parsers import compile_parser, compile_shaped_parser
from app.inputs.paths import HEADER
from app.inputs.records import InvalidRecord, WireModel
from app.inputs.wire_formats import key_decoder, value_decoder

__all__ = ["ParsedSide", "side_parser"]


class ParsedSide(Protocol):
    """What of a :class:`app.joins.spec.Side` its parser reads (a protocol: the spec imports
    this module, not the other way round)."""

    @property
    def model(self) -> type[WireModel]: ...
    @property
    def time(self) -> str: ...
    @property
    def paths(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def time_format(self) -> str: ...
    @property
    def time_given(self) -> bool: ...
    @property
    def from_timestamp(self) -> bool: ...
    @property
    def format(self) -> str: ...
    @property
    def field_names(self) -> tuple[str, ...]: ...
    @property
    def shaped(self) -> bool: ...
    @property
    def input_key_format(self) -> str: ...
    def path_of(self, flat: str) -> str: ...


def side_parser(
    side: ParsedSide, schemas: Any = None, check_key: bool = True, key_format: str | None = None
) -> Any:
    """(key, value, timestamp=None, headers=None) -> the flat record, or InvalidRecord
    (:meth:`app.joins.spec.Side.parser` says what the options mean)."""
    # a header is text: a time read from one is converted, whatever the side says
    converted = (
        side.time_given
        or side.time_format != "epoch_ms"
        or side.path_of(side.time).startswith(HEADER)
    )
    paths = dict(side.paths) or {f: f for f in side.field_names}
    parse: Callable[..., Any]
    if side.format == "json" and not side.shaped and check_key:
        # the fast path itself, no wrapper (it takes the timestamp too, and ignores it)
        parse = cast(Callable[..., Any], compile_parser(side.model))
        if side.time_given:
            # "time_format": "epoch_ms" written out: a float or a string of one too; a
            # record the fast path refuses is read again, converting its time
            fast = parse
            lenient = compile_shaped_parser(
                side.model, paths, side.time, "epoch_ms", False, None, check_key
            )

            def parse_epoch_ms(
                key: bytes | None,
                value: bytes | None,
                timestamp: Any = None,
                headers: Any = None,
            ) -> Any:
                try:
                    return fast(key, value)
                except InvalidRecord:
                    return lenient(key, value, timestamp, headers)

            parse = parse_epoch_ms
    else:
        parse = compile_shaped_parser(
            side.model,
            paths,
            side.time,
            side.time_format if converted else None,
            side.from_timestamp,
            None if side.format == "json" else value_decoder(side.format, schemas),
            check_key,
        )
    decode_key = key_decoder(key_format or side.input_key_format, schemas) if check_key else None
    if decode_key is None:
        return parse

    def parse_keyed(
        key: bytes | None, value: bytes | None, timestamp: Any = None, headers: Any = None
    ) -> Any:
        return parse(decode_key(key), value, timestamp, headers)

    return parse_keyed
