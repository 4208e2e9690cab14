"""First answers already final: the share of joins whose first revision is their last, with and
without a bounded hold (``hold_ms``), on the out-of-order workload.

The workload is :mod:`bench.flow_control`'s (``sample-traffic``'s generator: moods and
recommendations, arrivals jittered by up to 3 s, 30 % of moods 20 s later still), in arrival
order, per partition. It runs through the engine's own rules and state layout
(:class:`app.joins.state.JoinState`, as :mod:`tests.replay` does) the way the agent drives them
(:meth:`app.agents.event_join.JoinEngine.on_record`: advance the stream time, end the holds it
passed, join the record): the figure depends on the arrival order and the rules only, not on
the machine, so no broker is needed and every run gives the same figure. A hold helps the
events that find *no* version on arrival (their first answer was null); an event whose first
answer names a version that a later, late version replaces is corrected as before.

Also per hold: ``first_answer_wait_ms``, the median and p99 of how much stream time passed
between an event's time and its first answer (what the hold costs a consumer of the early
answer).

``python -m bench.first_answers [--records N] [--holds 1000,5000,30000]``
"""

from __future__ import annotations

from typing import Any

from bench.flow_control import PARTITIONS, scenario
from bench.harness import Bench, Figure
from tests.kafka_io import partition_of

#: the hold the headline figure names (ms of stream time)
HEADLINE_HOLD_MS = 5000
RETENTION_MS = 600_000


def replay(records: list[Any], hold_ms: int | None) -> dict[str, Any]:
    """The workload through the engine with ``hold_ms`` (None: plain left): the share of
    first answers that were final, and how long first answers waited (stream time)."""
    from app.inputs.records import MoodIn, RecommendationIn
    from app.joins.catalog import mood_spec
    from app.joins.resolve import resolve
    from app.joins.state import JoinState
    from app.settings import Settings
    from app.state.overlay import MemoryIO, Overlay

    spec = resolve(
        {
            **mood_spec(Settings()),
            "retention_ms": RETENTION_MS,
            "review_lag_ms": None,
            "hold_ms": hold_ms,
        }
    )
    state = JoinState(
        spec,
        Overlay(MemoryIO(bytes_keys=False)),
        Overlay(MemoryIO()),
        Overlay(MemoryIO(bytes_keys=False)),
    )
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    waits: list[int] = []

    def seen(revisions: list[Any], clock: int) -> None:
        for r in revisions:
            if r.revision == 1:
                first[r.id] = r.answer
                waits.append(max(clock - r.event_time, 0))
            last[r.id] = r.answer

    for offset, (kind, key, value) in enumerate(records):
        p = partition_of(key.encode(), PARTITIONS)
        clock = state.advance(p, value["event_time"])
        horizon = clock - RETENTION_MS
        src = [0 if kind == "event" else 1, offset]
        seen(state.release_holds(p, clock, src), clock)
        if kind == "event":
            rec = RecommendationIn.model_validate(value)
            revs, _ = state.on_event(p, spec.event_of(rec), horizon, horizon, src)
        else:
            rec = MoodIn.model_validate(value)
            revs = state.on_version(
                p, spec.key_of(rec, spec.dimension), spec.version_of(rec), horizon, horizon, src
            )
        seen(revs, clock)
        state.end_batch()
    for p in range(PARTITIONS):  # the stream ends: every hold ends
        clock = state.stream_time(p)
        if clock is not None:
            seen(state.release_holds(p, clock + (hold_ms or 0)), clock + (hold_ms or 0))
    final = sum(1 for jid, a in first.items() if last[jid] == a)
    waits.sort()
    return {
        "joins": len(first),
        "first_final": final,
        "share_first_final": round(final / len(first), 4) if first else None,
        "first_answer_wait_ms": {
            "p50": waits[len(waits) // 2] if waits else None,
            "p99": waits[int(len(waits) * 0.99)] if waits else None,
        },
    }


def run(
    records: int = 2000,
    seed: int = 7,
    holds: tuple[int, ...] = (1000, 5000, 30_000),
) -> dict[str, Any]:
    data = scenario(records, seed)
    without = replay(data, None)
    with_hold = {str(h): replay(data, h) for h in holds}
    headline = with_hold.get(str(HEADLINE_HOLD_MS)) or replay(data, HEADLINE_HOLD_MS)
    return {
        "name": "first_answers",
        "records": records,
        "share_first_final_without_hold": without["share_first_final"],
        "share_first_final_with_hold": headline["share_first_final"],
        "hold_ms": HEADLINE_HOLD_MS,
        "without_hold": without,
        "with_hold": with_hold,
    }


FIGURES = (
    Figure(
        "share_first_final_without_hold", note="left: first revisions that were the join's last"
    ),
    Figure(
        "share_first_final_with_hold", note=f"left with hold_ms {HEADLINE_HOLD_MS}, same records"
    ),
)


def report(f: dict[str, Any]) -> str:
    holds = ", ".join(
        f"hold {h} ms {r['share_first_final']:.1%} (wait p50 {r['first_answer_wait_ms']['p50']} ms)"
        for h, r in f["with_hold"].items()
    )
    return (
        f"first answers already final ({f['records']} records, out of order): without a "
        f"hold {f['share_first_final_without_hold']:.1%}; {holds}"
    )


BENCH = Bench(
    "first_answers",
    run,
    FIGURES,
    report=report,
    suite=lambda quick, runs: {"records": 500 if quick else 2000},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())
