"""How a spec side names a field of its records: a path, a Kafka header, the Kafka timestamp.

A path is a field's names from the top of the JSON value, joined by dots: ``"user.id"`` reads
``{"user": {"id": …}}``. A name that has a dot in it, or a bracket, is written in square
brackets: ``"[user.id]"`` is the top-level field ``user.id``, ``"meta.[@timestamp]"`` the field
``@timestamp`` of ``meta``. Any other character is itself (``"@timestamp"``, ``"_id"``,
``"user-id"``); a name that starts with ``$`` is bracketed too (``"[$timestamp]"``), since
``$`` starts etj's own sources:

- ``"$timestamp"``: the record's Kafka timestamp (:data:`app.inputs.time_formats.KAFKA_TIMESTAMP`);
- ``"$header.<name>"``: the record's Kafka header ``<name>`` (the whole rest, dots included),
  its bytes as UTF-8 text; a header given twice: the last one (as Kafka's
  ``Headers.lastHeader``).

Each field lands in the side's flat record (and the output, when copied) under its **flat
name** (:func:`flat_name`): its names joined by ``_``, each character that is not a letter, a
digit or ``_`` turned into ``_`` and leading or trailing ``_`` dropped (``user.id`` ->
``user_id``, ``@timestamp`` -> ``timestamp``, ``_id`` -> ``id``, ``$header.ce_time`` ->
``ce_time``), unless a ``copy`` entry renames it. No Faust: the spec's resolution, the parsers
and the batch twin's archive read paths through it.
"""

from __future__ import annotations

import re
from typing import Any

from app.inputs.records import InvalidRecord, json_type

__all__ = [
    "HEADER",
    "MISSING",
    "PathError",
    "flat_name",
    "header_name",
    "read_header",
    "read_parts",
    "split_path",
]

#: the prefix of a header field: ``$header.<name>``
HEADER = "$header."
#: what :func:`read_parts` answers for a field that is not there
MISSING: Any = object()

_NOT_WORD = re.compile(r"\W+")


class PathError(ValueError):
    """A path that cannot be read; ``str(exc)`` says why (a spec refuses it with that)."""


def split_path(path: str) -> tuple[str, ...]:
    """A value path's names: ``"a.b"`` -> ``("a", "b")``, ``"[a.b].c"`` -> ``("a.b", "c")``;
    raises :class:`PathError` saying why it is not one (an empty name, an unclosed bracket, a
    name starting with ``$`` not bracketed)."""
    parts: list[str] = []
    i, n = 0, len(path)
    while True:
        if i < n and path[i] == "[":
            end = path.find("]", i + 1)
            if end < 0:
                raise PathError(f"{path!r}: '[' at {i} is never closed by ']'")
            part = path[i + 1 : end]
            i = end + 1
            if i < n and path[i] != ".":
                raise PathError(f"{path!r}: ']' at {i - 1} must end the path or come before '.'")
        else:
            end = path.find(".", i)
            end = n if end < 0 else end
            part = path[i:end]
            if "[" in part or "]" in part:
                raise PathError(
                    f"{path!r}: a name with a bracket in it is written in brackets only "
                    "where the whole name is ('[name]')"
                )
            if part.startswith("$"):
                raise PathError(
                    f"{path!r}: a name starting with '$' is written in brackets "
                    f"('[{part}]'): '$timestamp' and '$header.<name>' are etj's"
                )
            i = end
        if not part:
            raise PathError(f"{path!r}: an empty name (two dots, or a dot at an end)")
        parts.append(part)
        if i >= n:
            return tuple(parts)
        i += 1  # the dot
        if i >= n:
            raise PathError(f"{path!r}: an empty name (two dots, or a dot at an end)")


def header_name(path: str) -> str | None:
    """The header a ``$header.<name>`` path reads (None: not a header path)."""
    if not path.startswith(HEADER):
        return None
    name = path[len(HEADER) :]
    if not name:
        raise PathError(f"{path!r}: no header name after '{HEADER}'")
    return name


def flat_name(path: str, parts: tuple[str, ...] | None = None) -> str:
    """The flat field name of a path (module docstring); raises :class:`PathError` when none
    is left (then a ``copy`` rename names it)."""
    header = header_name(path)
    names = (header,) if header is not None else (parts or split_path(path))
    words = [_NOT_WORD.sub("_", p).strip("_") for p in names]
    flat = "_".join(w for w in words if w)
    if not flat:
        raise PathError(f"{path!r} has no letter or digit to name its field by")
    if flat[0].isdigit():
        flat = f"f_{flat}"
    return flat


def read_parts(data: dict[str, Any], parts: tuple[str, ...], path: str) -> Any:
    """The value at ``parts`` of a decoded JSON object, :data:`MISSING` when a name is absent;
    a parent that is there but not an object raises :class:`InvalidRecord` naming it."""
    node: Any = data
    for i, part in enumerate(parts):
        if type(node) is not dict:
            parent = ".".join(parts[:i])
            raise InvalidRecord(f"{path}: {parent} is {json_type(node)}, not an object")
        node = node.get(part, MISSING)
        if node is MISSING:
            return MISSING
    return node


def read_header(headers: Any, name: str) -> Any:
    """The text of the last header ``name`` of a record's headers ((name, bytes) pairs, or
    None), :data:`MISSING` when it has none, None for a header whose value is null; raises
    :class:`InvalidRecord` for one that is not UTF-8."""
    found: Any = MISSING
    for key, raw in headers or ():
        if key == name:
            found = raw
    if found is MISSING or found is None:
        return found
    try:
        return bytes(found).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            f"{HEADER}{name}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
