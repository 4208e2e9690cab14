"""Where the ``archive`` command writes a topic's records (:mod:`app.commands.archive`): one
JSON value per line, or a Parquet dataset with the topic's typed columns, a directory per
topic partition. Apart from the command, which chooses the records and their columns, so each
module holds one concern (the command reached 600 lines when tombstones were archived too).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import IO, Any, Protocol

__all__ = ["JsonLinesSink", "ParquetSink", "Sink", "as_text"]


def as_text(value: Any) -> Any:
    """A string column's value: a string as it is, anything else (a ``json`` field's object,
    array or number) as its compact JSON text, None as None."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


class Sink(Protocol):
    def write(
        self, partition: int, offset: int, value: Any, timestamp: int | None = None
    ) -> None: ...
    def close(self) -> None: ...


class JsonLinesSink:
    """One JSON value per line, in the order records are read (``-``: stdout); an object
    gets its record's Kafka timestamp as ``_timestamp`` (no wire field starts with ``_``)."""

    def __init__(self, out: str | Path) -> None:
        self.stdout = str(out) == "-"
        self.f: IO[str] = sys.stdout if self.stdout else Path(out).open("w", encoding="utf-8")

    def write(self, partition: int, offset: int, value: Any, timestamp: int | None = None) -> None:
        if timestamp is not None and isinstance(value, dict):
            value = {**value, "_timestamp": timestamp}
        self.f.write(json.dumps(value, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self.stdout:
            self.f.flush()
        else:
            self.f.close()


class ParquetSink:
    """A Parquet dataset: ``OUT/partition=P/part-NNNNN.parquet``, a file per ``rows_per_file``.

    Written to ``OUT.tmp-archive`` and renamed at the end, so a reader never sees half an
    archive; an existing OUT is replaced. Rows are buffered per partition (memory: at most
    ``rows_per_file`` values per partition).
    """

    def __init__(
        self, out: str | Path, columns: list[tuple[str, str]] | None, rows_per_file: int = 1_000_000
    ) -> None:
        try:
            import pyarrow as pa
        except ImportError as exc:  # pragma: no cover - the batch extra is missing
            raise SystemExit("archive: Parquet needs pyarrow (pip install '.[batch]')") from exc
        self.pa = pa
        self.out = Path(out)
        self.tmp = self.out.with_name(self.out.name + ".tmp-archive")
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        self.columns = columns
        fields = columns or [("value", "string")]
        self.schema = pa.schema(
            [(n, pa.type_for_alias(t)) for n, t in fields]
            + [("_offset", pa.int64()), ("_timestamp", pa.int64())]
        )
        self.rows_per_file = rows_per_file
        self.buffers: dict[int, list[dict[str, Any]]] = {}
        self.files: dict[int, int] = {}

    def write(self, partition: int, offset: int, value: Any, timestamp: int | None = None) -> None:
        row: dict[str, Any]
        if self.columns is None:
            row = {"value": json.dumps(value, separators=(",", ":"))}
        elif isinstance(value, dict):
            row = {
                n: as_text(value.get(n)) if t == "string" else value.get(n) for n, t in self.columns
            }
        else:  # not a record of this topic: nothing to type it as
            row = {n: None for n, _ in self.columns}
        row["_offset"] = offset
        row["_timestamp"] = timestamp
        buf = self.buffers.setdefault(partition, [])
        buf.append(row)
        if len(buf) >= self.rows_per_file:
            self._flush(partition)

    def _flush(self, partition: int) -> None:
        import pyarrow.parquet as pq

        rows = self.buffers.pop(partition, [])
        if not rows:
            return
        n = self.files.get(partition, 0)
        self.files[partition] = n + 1
        folder = self.tmp / f"partition={partition}"
        folder.mkdir(exist_ok=True)
        table = self.pa.Table.from_pylist(rows, schema=self.schema)
        pq.write_table(table, folder / f"part-{n:05d}.parquet")

    def close(self) -> None:
        for partition in list(self.buffers):
            self._flush(partition)
        if not self.files:  # an empty topic: one empty file, so the schema is readable
            import pyarrow.parquet as pq

            (self.tmp / "partition=0").mkdir(exist_ok=True)
            pq.write_table(
                self.schema.empty_table(), self.tmp / "partition=0" / "part-00000.parquet"
            )
        if self.out.exists():
            shutil.rmtree(self.out) if self.out.is_dir() else self.out.unlink()
        self.tmp.rename(self.out)
