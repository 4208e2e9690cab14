"""``faust -A app.main snapshots``: the table snapshots in a store, one line each.

Lists what :mod:`app.state.snapshot_store` finds under ``ETJ_SNAPSHOT_URL`` (or ``--url``): table
(its changelog topic), partition, the changelog offset it covers, when it was taken and its size;
``--json`` prints one JSON object per snapshot instead. Reads the store only; needs no broker.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from faust.cli import option

from app.faust_app import app, settings
from app.state.snapshot_store import Manifest, Snapshots


def lines(manifests: list[Manifest]) -> list[str]:
    """The table the command prints: a header, then one row per snapshot."""
    rows = [("table", "partition", "offset", "taken (UTC)", "bytes", "id")]
    for m in manifests:
        taken = datetime.fromtimestamp(m.created_ms / 1000, tz=UTC)
        rows.append(
            (
                m.table,
                str(m.partition),
                str(m.offset),
                taken.strftime("%Y-%m-%d %H:%M:%S"),
                f"{m.size:,}",
                m.id,
            )
        )
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.rjust(w) if i in (1, 2, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(r, width))
        ).rstrip()
        for r in rows
    ]


@app.command(
    option("--url", default=None, help="Snapshot store (default: ETJ_SNAPSHOT_URL)."),
    option("--table", default=None, help="Only this changelog topic."),
    option("--json", "as_json", is_flag=True, default=False, help="One JSON object per snapshot."),
)
async def snapshots(self: object, url: str | None, table: str | None, as_json: bool) -> None:
    """List the table snapshots in the store: table, partition, offset, time, size."""
    url = url or settings.snapshot_url
    if not url:
        raise SystemExit("no snapshot store: set ETJ_SNAPSHOT_URL or pass --url")
    found = Snapshots(url).list(table)
    if as_json:
        for m in found:
            print(
                json.dumps(
                    {
                        "table": m.table,
                        "partition": m.partition,
                        "offset": m.offset,
                        "created_ms": m.created_ms,
                        "bytes": m.size,
                        "id": m.id,
                        "fingerprint": m.fingerprint,
                    }
                ),
                flush=True,
            )
        return
    for line in lines(found):
        print(line, flush=True)
    if not found:
        print(f"(no snapshots in {url})", flush=True)
