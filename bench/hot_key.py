"""A hot key: one consultant carries every recommendation, 100,000 and more of them in
retention, with the producer's default batching; exact, at what rate.

Why: the mood join once kept a consultant's joins in one table row, rewritten whole by every
event; tried with skewed keys, a worker fail-stopped after 72,366 of 79,971 recommendations (the
row passed the 1,000,000-byte request limit) and on every restart after. Every join now keeps a
row per join (app.joins.state): this measures that a key's fan-in costs nothing per event.

One backlog (``sample-traffic``'s generator, one consultant, a mood for every ninth
recommendation or so, a share of them 20 s late; event times 20 ms apart, so everything is
within the 1-hour retention) is read by one worker with the producer's default batching. Rate
= input records ÷ seconds from the first output to all inputs consumed (as bench.throughput);
``exact_share``: the final revision of each recommendation against its exact answer. The
answers come from a sorted sweep (:func:`swept_answers`), not from tests/oracle.py's brute force
directly: with one key that is quadratic (127 s for 100,000 recommendations × 11,000 moods, a
twelfth of ``make bench``). The sweep shares no code with the engine (no bisect, no state) and
is itself held to the oracle in every run, on every tenth recommendation
(``oracle_checked``): a sweep that disagrees fails the benchmark.

``python -m bench.hot_key [--recommendations N]``
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.harness import Bench, Figure, Results
from bench.peer_quix import exact_share
from bench.throughput import START_MS, load_inputs
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched


def hot_key_ratio(results: Results) -> float | None:
    """The hot key's rate ÷ ``bench.throughput``'s default-batching rate (same machine, same
    run): what one key carrying every join costs against keys spread over 1,000 consultants."""
    hot = (results.get("hot_key") or {}).get("hot_key_rps")
    spread = (results.get("throughput") or {}).get("worker_batched_rate")
    return round(hot / spread, 3) if hot and spread else None


RPS = Figure("hot_key_rps", unit="records/s", note="default batching")
EXACT = Figure(
    "hot_key_exact_share", "exact_share", 1.0, "==", note="final answers equal to the oracle's"
)
RATIO = Figure("hot_key_ratio", hot_key_ratio, 0.8, note="÷ throughput_batched_rps")

MOOD_RATIO = 0.1
STEP_MS = 20


def workload(recommendations: int, seed: int) -> list[tuple[str, str, dict]]:
    """At least ``recommendations`` recommendations of one consultant, and its moods."""
    from app.commands.sample_traffic import sample_moods_and_events

    count = int(recommendations / (1 - MOOD_RATIO) * 1.02)
    while True:
        data = sample_moods_and_events(
            seed=seed,
            count=count,
            start_ms=START_MS,
            step_ms=STEP_MS,
            mood_ratio=MOOD_RATIO,
            consultants=("hot",),
        )
        if sum(1 for k, _, _ in data if k == "event") >= recommendations:
            return data
        count = int(count * 1.05)


def swept_answers(data: list[tuple[str, str, dict]]) -> dict[str, tuple[Any, ...]]:
    """join id -> the exact answer, as ``tests.oracle.exact_mood_joins`` states it (the greatest
    (event_time, mood) strictly before the recommendation, per consultant), by one sweep of each
    consultant's recommendations and moods in event-time order."""
    from tests.oracle import Recommendation

    moods: dict[str, set[tuple[int, str]]] = {}
    recs: dict[str, list[Recommendation]] = {}
    for kind, _, v in data:
        if kind == "mood":
            moods.setdefault(v["name"], set()).add((v["event_time"], v["mood"]))
        else:
            recs.setdefault(v["consultant"], []).append(
                Recommendation(v["consultant"], v["recommendation"], v["event_time"], v.get("id"))
            )
    out: dict[str, tuple[Any, ...]] = {}
    for name, rs in recs.items():
        history = sorted(moods.get(name, ()))
        i, best = 0, (None, None)
        for r in sorted(rs, key=lambda r: r.event_time):
            while i < len(history) and history[i][0] < r.event_time:
                best, i = history[i], i + 1
            out[r.join_id] = (r.join_id, name, r.event_time, r.recommendation, best[1], best[0])
    return out


def held_to_oracle(
    data: list[tuple[str, str, dict]], swept: dict[str, tuple[Any, ...]], every: int = 10
) -> int:
    """Every ``every``-th recommendation's swept answer against tests/oracle.py's; the number
    checked (AssertionError naming the first that differs)."""
    from tests.oracle import Mood, Recommendation, exact_mood_joins

    moods = [Mood(v["name"], v["mood"], v["event_time"]) for k, _, v in data if k == "mood"]
    recs = [
        Recommendation(v["consultant"], v["recommendation"], v["event_time"], v.get("id"))
        for k, _, v in data
        if k == "event"
    ][::every]
    oracle = exact_mood_joins(moods, recs)
    for jid, answer in oracle.items():
        assert swept[jid] == answer, f"sweep {swept[jid]} != oracle {answer}"
    return len(oracle)


def run(recommendations: int = 100_000, seed: int = 1, partitions: int = 4) -> dict[str, Any]:
    data = workload(recommendations, seed)
    exact = swept_answers(data)
    checked = held_to_oracle(data, exact)
    with bench_broker() as broker, workdir() as folder:
        names = batched(new_names(broker, partitions=partitions))
        asyncio.run(load_inputs(broker.bootstrap, names, data, partitions))
        t = time_to_last_output(
            names,
            folder,
            [names.moods_topic, names.events_topic],
            len(data),
            [names.output_topic],
            broker.bootstrap,
            name="hot",
        )
    share = exact_share(t["outputs"], exact)
    span_s = (
        max(v["event_time"] for _, _, v in data) - min(v["event_time"] for _, _, v in data)
    ) / 1000
    return {
        "name": "hot_key",
        "records": len(data),
        "recommendations": len(exact),
        "moods": len(data) - len(exact),
        "event_time_span_s": round(span_s),
        "seconds": round(t["seconds"], 3),
        "hot_key_rps": round(len(data) / t["seconds"]),
        "exact_share": round(share, 4),
        "oracle_checked": checked,
        "outputs": len(t["outputs"]),
        "batching": "default",
    }


BENCH = Bench(
    "hot_key",
    run,
    (RPS, EXACT, RATIO),
    # one consultant with 100,000 recommendations in retention, default batching
    suite=lambda quick, runs: {"recommendations": 20_000 if quick else 100_000},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())
