"""``GET /joins/``: the join specs this worker runs, with this worker's counters.

Not routed: every worker runs the same specs; the counters are this process's (held, released,
unmatched ... since it started), for a quick look — Prometheus has them per worker too.
(``/joins/{consultant}/`` is the mood join's per-key view, in :mod:`app.views`.)
"""

from __future__ import annotations

from faust.web import Request, Response, View

from app.agents.event_join import engines
from app.faust_app import app
from app.joins.metrics import snapshot


@app.page("/joins/")
async def list_joins(view: View, request: Request) -> Response:
    """Every join spec (topics, fields, mode, as-of rule, retention, window) and its counters."""
    return view.json({"joins": [{**e.spec.describe(), "counters": snapshot(name)}
                                for name, e in engines.items()]})
# -> {"joins": [{"name", "events": {...}, "dimension": {...}, "output", "output_fields", "mode",
#                "asof", "retention_ms", "window_ms", ..., "counters": {"records", "held", ...}}]}
