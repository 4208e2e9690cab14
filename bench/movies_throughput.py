"""The movies join's throughput on one worker: a backlog of movie versions, then ratings.

Both inputs are in the broker before the worker starts (a replay: the catalogue first, as a
service loading it would, then the ratings). The join (``movies`` in app/joins/catalog.py:
inner mode, at-or-before-else-earliest, per-join layout) joins each rating with the movie
version known at its time. Rate = input records ÷ seconds from the first rated-movie output to
every input consumed and the last revision written (``bench.workers.time_to_last_output``);
one-record producer batches (tansu, see bench.throughput).

``python -m bench.movies_throughput [--records N] [--runs R]``
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from bench.harness import Bench, Figure, each_run, medians
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched
from tests.kafka_io import create_topics, jbytes, produce_bulk

RPS = Figure("movies_throughput_rps", unit="records/s", note="one-record batches")
BATCHED_RPS = Figure(
    "movies_throughput_batched_rps", goal=20_000, unit="records/s", note="default batching"
)
START_MS = 1_790_000_000_000
DAY = 86_400_000


def workload(
    records: int,
    seed: int,
    movie_share: float = 0.1,
) -> list[tuple[str, str, dict]]:
    """``records`` inputs: a catalogue (``movie_share`` of them: movies with one to three
    versions, stamped days before the ratings) then ratings of random movies, 100 ms apart
    with up to 3 s of arrival jitter."""
    rng = random.Random(seed)
    n_movies = max(1, int(records * movie_share / 2))
    movies: list[tuple[str, str, dict]] = []
    for m in range(n_movies):
        mid = f"m{m:06d}"
        for v in range(rng.randint(1, 3)):
            if len(movies) < records * movie_share:
                movies.append(
                    (
                        "movie",
                        mid,
                        {
                            "movie_id": mid,
                            "title": f"Title {m} v{v}",
                            "event_time": START_MS - (10 - v) * DAY + rng.randrange(DAY),
                        },
                    )
                )
    known = sorted({k for _, k, _ in movies})
    timed = []
    for i in range(records - len(movies)):
        t = START_MS + i * 100 + rng.randrange(100)
        mid = rng.choice(known)
        timed.append(
            (
                t + rng.randrange(3001),
                i,
                (
                    "rating",
                    mid,
                    {
                        "id": f"r-{seed}-{i}",
                        "movie_id": mid,
                        "user_id": f"u{rng.randrange(5000)}",
                        "rating": rng.randint(1, 10) / 2,
                        "event_time": t,
                    },
                ),
            )
        )
    timed.sort()
    return movies + [rec for _, _, rec in timed]


def one_run(
    records: int,
    seed: int,
    partitions: int,
    batching: bool = False,
) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder:
        names = new_names(broker, partitions=partitions)
        names = batched(names) if batching else names
        data = workload(records, seed)
        topic = {"movie": names.movies_topic, "rating": names.ratings_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), partitions))
        asyncio.run(
            produce_bulk(
                broker.bootstrap,
                ((topic[k], key.encode(), jbytes(v)) for k, key, v in data),
                partitions,
            )
        )
        t = time_to_last_output(
            names,
            folder,
            list(topic.values()),
            len(data),
            [names.rated_movies_topic],
            broker.bootstrap,
            name="movies",
        )
    ratings = sum(1 for k, _, _ in data if k == "rating")
    answered = {(o.json() or {}).get("id") for o in t["outputs"]}
    return {
        "records": len(data),
        "ratings": ratings,
        "seconds": t["seconds"],
        "rate": len(data) / t["seconds"],
        "outputs": len(t["outputs"]),
        "ratings_answered": len(answered),
    }


def run(
    records: int = 10_000,
    runs: int = 3,
    seed: int = 1,
    partitions: int = 4,
    batched_records: int = 100_000,
) -> dict[str, Any]:
    """Median over ``runs`` runs, each on a fresh broker: one-record producer batches
    (``records``), then the producer's default batching (``batched_records``: a backlog long
    enough to time tens of thousands of records a second)."""
    results = [one_run(records, seed + i, partitions) for i in range(runs)]
    batched_runs = (
        [one_run(batched_records, seed + 100 + i, partitions, batching=True) for i in range(runs)]
        if batched_records
        else []
    )
    return {
        "name": "movies_throughput",
        "records": records,
        "runs": runs,
        "partitions": partitions,
        "batched_records": batched_records,
        "movies_throughput_rps": round(medians(results)["rate"]),
        "movies_throughput_batched_rps": (
            round(medians(batched_runs)["rate"]) if batched_runs else None
        ),
        "each_run": each_run(results + batched_runs),
    }


def report(m: dict[str, Any]) -> str:
    return (
        f"movies join ({m['records']:,} records, one-record batches): "
        f"{m['movies_throughput_rps']}/s"
    )


BENCH = Bench(
    "movies_throughput",
    run,
    (RPS, BATCHED_RPS),
    report=report,
    # the median of 2 (single runs ranged within ~15 %); the batched rates are goals
    suite=lambda quick, runs: {
        "records": 3_000 if quick else 10_000,
        "runs": min(runs, 2),
        "batched_records": 20_000 if quick else 100_000,
    },
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())
