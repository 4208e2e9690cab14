"""``faust -A app.main joins validate [FILE]``: check a joins file before it runs, offline.

Why: a spec's mistake was found only by starting a worker against a broker, and said as the
last line of a ~90-line traceback. Here the specs a worker would run with ``FILE`` as its
``ETJ_JOINS_FILE`` (default: ``ETJ_JOINS_FILE``; the built-in ones ``ETJ_BUILTIN_JOINS``
names) are resolved and checked together, as the worker does at start, with no broker: exit 0
and one line per spec saying what it joins, or exit 2 and the one line the worker's start is
refused with (:func:`app.runtime.refusal_line`), naming the spec, the side and the field. What
needs a broker (co-partitioning, a ``$timestamp`` topic's timestamp type) is checked at start.

The app is loaded first (``faust -A app.main``), and it resolves the specs of
``ETJ_JOINS_FILE`` as it loads: for this command a spec error there is left to it
(:func:`app.runtime.validating`), so an invalid file is reported, not raised.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from faust.cli import argument

from app.faust_app import app, settings
from app.joins.catalog import load_all
from app.joins.fk_spec import FkJoinSpec
from app.joins.resolve import refuse_without_registry
from app.joins.spec import JoinSpec, Side, SpecError
from app.runtime import START_REFUSED, refusal_line

__all__ = ["summary", "validate"]


def _side(side: Side) -> str:
    """``topic (key)``, and how it is read when not as it is."""
    via = " via its repartition topic" if side.repartition else ""
    return f"{side.topic} ({side.path_of(side.key) if not side.key_fields else side.key}){via}"


def summary(spec: JoinSpec | FkJoinSpec) -> str:
    """One line saying what a valid spec joins."""
    if isinstance(spec, FkJoinSpec):
        return (
            f"ok  {spec.name} (foreign-key): {_side(spec.left)} -> {_side(spec.right)} by "
            f"{spec.left.path_of(spec.fk)} -> {spec.output}"
        )
    return (
        f"ok  {spec.name}: {_side(spec.events)} x {_side(spec.dimension)} -> {spec.output} "
        f"({spec.mode}, {spec.asof}, retention {spec.retention_ms} ms"
        f"{', emit final' if spec.emit == 'final' else ', finality' if spec.finality else ''})"
    )


def validate(path: Path | None) -> tuple[int, list[str]]:
    """(exit status, the lines to print) of ``joins validate`` for ``path`` (None:
    ``ETJ_JOINS_FILE``)."""
    s = settings if path is None else settings.model_copy(update={"joins_file": path})
    try:
        events, fks = load_all(s)
        refuse_without_registry(events, s.schema_registry_url)  # as the worker does at start
    except SpecError as exc:
        return START_REFUSED, [refusal_line(exc)]
    specs: list[JoinSpec | FkJoinSpec] = [*events, *fks]
    return 0, [summary(spec) for spec in specs]


@app.command(
    argument("action", type=click.Choice(["validate"])),
    argument("file", required=False, type=click.Path(path_type=Path)),
)
async def joins(self: object, action: str, file: Path | None) -> None:
    """Check the join specs of FILE (default ETJ_JOINS_FILE) offline (ACTION: validate)."""
    status, lines = validate(file)
    out = sys.stdout if status == 0 else sys.stderr
    for line in lines:
        print(line, file=out, flush=True)
    if status:
        raise SystemExit(status)
