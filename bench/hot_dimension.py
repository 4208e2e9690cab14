"""A hot dimension key: one consultant with 100,000 moods of ~200 bytes in retention,
recommendations across them, a tenth of the moods late; exact, at what rate.

Why: a key's versions were once ONE ``dimension`` row, rewritten whole by every batch that
changed it: 6,000 moods of 200 characters made it 1.3 MB, past Kafka's 1 MB request limit, and
the worker exited (``MessageSizeTooLargeError``) on every restart while that history was in
retention; before the wall, every batch paid O(history) for the key. Every version is now its
own row (``V`` rows, :mod:`app.joins.keys`), found by one-row range reads: this measures that a
key's history costs nothing per record.

One backlog, read by one worker with the producer's default batching: records 20 ms apart in
event time (all within the 1-hour retention), five moods to a recommendation, each mood a
distinct ~200-character string; a tenth of the moods are sent 2,000 records (~40 s of event
time) after their place, so they correct the recommendations after them (``late-dimension``).
Rate = input records ÷ seconds from the first output to all inputs consumed (as
bench.throughput); ``exact_share``: the final revision of each recommendation against its exact
answer (bench.hot_key's sweep, itself held to tests/oracle.py on a sample of them).

``python -m bench.hot_dimension [--moods N]``
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from bench.harness import Bench, Figure, Results
from bench.hot_key import held_to_oracle, swept_answers
from bench.peer_quix import exact_share
from bench.throughput import START_MS, load_inputs
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched


def hot_dimension_ratio(results: Results) -> float | None:
    """The hot dimension's rate ÷ ``bench.throughput``'s default-batching rate (same machine,
    same run): what one key with 100,000 versions costs against keys spread over many."""
    hot = (results.get("hot_dimension") or {}).get("hot_dimension_rps")
    spread = (results.get("throughput") or {}).get("worker_batched_rate")
    return round(hot / spread, 3) if hot and spread else None


RPS = Figure("hot_dimension_rps", unit="records/s", note="default batching")
EXACT = Figure(
    "hot_dimension_exact_share",
    "exact_share",
    1.0,
    "==",
    note="final answers equal to the oracle's",
)
RATIO = Figure("hot_dimension_ratio", hot_dimension_ratio, 0.7, note="÷ throughput_batched_rps")

STEP_MS = 20
MOODS_PER_EVENT = 5
LATE_SHARE = 0.1
LATE_BY = 2_000  # records


def workload(moods: int, seed: int) -> list[tuple[str, str, dict]]:
    """``moods`` moods of one consultant and a recommendation for every fifth, in arrival
    order: event time order, but a tenth of the moods sent ``LATE_BY`` records later."""
    rng = random.Random(seed)
    total = moods + moods // MOODS_PER_EVENT
    records: list[tuple[str, str, dict]] = []
    m = e = 0
    for i in range(total):
        t = START_MS + i * STEP_MS
        if i % (MOODS_PER_EVENT + 1) == MOODS_PER_EVENT and e < moods // MOODS_PER_EVENT:
            records.append(
                (
                    "event",
                    "hot",
                    {
                        "consultant": "hot",
                        "recommendation": f"r{e}",
                        "event_time": t,
                        "id": f"hot-{e}",
                    },
                )
            )
            e += 1
        else:
            text = f"{m:07d}-" + "".join(rng.choices("abcdefghij", k=192))
            records.append(("mood", "hot", {"name": "hot", "mood": text, "event_time": t}))
            m += 1
    late = {i for i, r in enumerate(records) if r[0] == "mood" and rng.random() < LATE_SHARE}
    order = sorted(range(len(records)), key=lambda i: i + (LATE_BY if i in late else 0))
    return [records[i] for i in order]


def run(moods: int = 100_000, seed: int = 1, partitions: int = 4) -> dict[str, Any]:
    data = workload(moods, seed)
    exact = swept_answers(data)
    checked = held_to_oracle(data, exact, every=max(1, len(exact) // 500))
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
            name="hotdim",
        )
    share = exact_share(t["outputs"], exact)
    return {
        "name": "hot_dimension",
        "records": len(data),
        "moods": len(data) - len(exact),
        "recommendations": len(exact),
        "mood_bytes": len(data[0][2]["mood"]) if data else 0,
        "seconds": round(t["seconds"], 3),
        "hot_dimension_rps": round(len(data) / t["seconds"]),
        "exact_share": round(share, 4),
        "oracle_checked": checked,
        "outputs": len(t["outputs"]),
        "batching": "default",
    }


BENCH = Bench(
    "hot_dimension",
    run,
    (RPS, EXACT, RATIO),
    # one consultant with 100,000 moods of ~200 bytes in retention, default batching
    suite=lambda quick, runs: {"moods": 20_000 if quick else 100_000},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())
