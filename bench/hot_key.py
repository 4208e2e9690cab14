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
``exact_share``: the final revision of each recommendation against tests/oracle.py.

``python -m bench.hot_key [--recommendations N]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from bench.peer_quix import exact_answers, exact_share
from bench.throughput import START_MS, load_inputs
from bench.workers import batched, bench_broker, new_names, time_to_last_output, workdir

MOOD_RATIO = 0.1
STEP_MS = 20


def workload(recommendations: int, seed: int) -> list[tuple[str, str, dict]]:
    """At least ``recommendations`` recommendations of one consultant, and its moods."""
    from app.commands.sample_traffic import sample_moods_and_events

    count = int(recommendations / (1 - MOOD_RATIO) * 1.02)
    while True:
        data = sample_moods_and_events(seed=seed, count=count, start_ms=START_MS,
                                       step_ms=STEP_MS, mood_ratio=MOOD_RATIO,
                                       consultants=("hot",))
        if sum(1 for k, _, _ in data if k == "event") >= recommendations:
            return data
        count = int(count * 1.05)


def run(recommendations: int = 100_000, seed: int = 1, partitions: int = 4) -> dict[str, Any]:
    data = workload(recommendations, seed)
    exact = exact_answers(data)
    with bench_broker() as broker, workdir() as folder:
        names = batched(new_names(broker, partitions=partitions))
        asyncio.run(load_inputs(broker.bootstrap, names, data, partitions))
        t = time_to_last_output(names, folder, [names.moods_topic, names.events_topic],
                                len(data), [names.output_topic], broker.bootstrap, name="hot")
    share = exact_share(t["outputs"], exact)
    span_s = (max(v["event_time"] for _, _, v in data)
              - min(v["event_time"] for _, _, v in data)) / 1000
    return {"name": "hot_key", "records": len(data), "recommendations": len(exact),
            "moods": len(data) - len(exact), "event_time_span_s": round(span_s),
            "seconds": round(t["seconds"], 3), "hot_key_rps": round(len(data) / t["seconds"]),
            "exact_share": round(share, 4), "outputs": len(t["outputs"]),
            "batching": "default"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recommendations", type=int, default=100_000)
    a = p.parse_args(argv)
    print(json.dumps(run(a.recommendations), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
