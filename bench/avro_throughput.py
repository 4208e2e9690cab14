"""What Schema Registry framed Avro costs (issue 56, item 1): the movies join as a spec of one's
own, run on one worker over the same backlog twice: the ratings and movies written as JSON
text, then the same records written by confluent-kafka's own ``AvroSerializer`` (magic byte,
schema id, Avro) with ``"format": "avro"`` on both sides, their writer schemas served by the
tests' registry (:mod:`tests.schema_registry`); revisions are JSON in both runs (the inputs'
cost alone).

Both inputs are in the broker before the worker starts (a replay, as in
``bench.movies_throughput``, whose workload this is). Rate = input records ÷ seconds from the
first record handed to the join (or its first output) to every input consumed and the last
revision written (``bench.workers.time_to_last_output``). Default producer batching.

- ``avro_throughput_rps``: the rate with Avro inputs;
- ``avro_throughput_ratio``: it ÷ the JSON rate on the same records (goal ≥ 0.8).

``python -m bench.avro_throughput [--records N] [--runs R]``
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from app.joins.catalog import movie_spec
from app.settings import Settings
from bench.harness import Bench, Figure, each_run, medians
from bench.movies_throughput import workload
from bench.workers import bench_broker, new_names, time_to_last_output, workdir
from tests.harness import batched
from tests.kafka_io import create_topics, jbytes, produce_bulk
from tests.schema_registry import RegistryServer

RPS = Figure("avro_throughput_rps", unit="records/s", note="default batching, Avro inputs")
RATIO = Figure(
    "avro_throughput_ratio",
    goal=0.8,
    unit="×",
    note="rate with Avro inputs ÷ with JSON (same records)",
)

SCHEMAS = {
    "rating": {
        "type": "record",
        "name": "Rating",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "movie_id", "type": "string"},
            {"name": "user_id", "type": "string"},
            {"name": "rating", "type": "double"},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    },
    "movie": {
        "type": "record",
        "name": "Movie",
        "fields": [
            {"name": "movie_id", "type": "string"},
            {"name": "title", "type": "string"},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    },
}


def spec(names: Any, avro: bool) -> dict[str, Any]:
    """The movies spec on this run's topics, named ``formats``."""
    s = movie_spec(
        Settings.model_construct(
            ratings_topic=names.ratings_topic,
            movies_topic=names.movies_topic,
            rated_movies_topic=names.rated_movies_topic,
            movie_ticks_topic=names.movie_ticks_topic,
            movie_retention_ms=30 * 86_400_000,
            movie_window_ms=30 * 86_400_000,
        )
    )
    s["name"] = "formats"
    s.pop("tables", None)
    if avro:
        s["events"] = {**s["events"], "format": "avro"}
        s["dimension"] = {**s["dimension"], "format": "avro"}
    return s


def avro_values(registry: RegistryServer, names: Any, data: list[Any]) -> list[bytes]:
    """Each record's value as confluent-kafka's ``AvroSerializer`` writes it."""
    import datetime as dt

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry.url})
    write = {k: AvroSerializer(client, json.dumps(s)) for k, s in SCHEMAS.items()}
    topic = {"movie": names.movies_topic, "rating": names.ratings_topic}
    out = []
    for kind, _, v in data:
        when = dt.datetime.fromtimestamp(v["event_time"] / 1000, tz=dt.UTC)
        ctx = SerializationContext(topic[kind], MessageField.VALUE)
        out.append(write[kind]({**v, "event_time": when}, ctx))
    return out


def one_run(records: int, seed: int, partitions: int, avro: bool) -> dict[str, Any]:
    with bench_broker() as broker, workdir() as folder, RegistryServer() as registry:
        names = batched(new_names(broker, partitions=partitions))
        raw = spec(names, avro)
        joins = Path(folder) / "joins.json"
        joins.write_text(json.dumps([raw]))
        data = workload(records, seed)
        values = avro_values(registry, names, data) if avro else [jbytes(v) for _, _, v in data]
        topic = {"movie": names.movies_topic, "rating": names.ratings_topic}
        asyncio.run(create_topics(broker.bootstrap, list(topic.values()), partitions))
        asyncio.run(
            produce_bulk(
                broker.bootstrap,
                ((topic[k], key.encode(), value) for (k, key, _), value in zip(data, values)),
                partitions,
            )
        )
        t = time_to_last_output(
            names,
            folder,
            [names.ratings_topic, names.movies_topic],
            len(data),
            [names.rated_movies_topic],
            broker.bootstrap,
            name="avro" if avro else "json",
            joins_file=joins,
            schema_registry_url=registry.url,
        )
    return {
        "records": len(data),
        "seconds": t["seconds"],
        "rate": len(data) / t["seconds"],
        "outputs": len(t["outputs"]),
        "avro": avro,
    }


def run(
    records: int = 100_000, runs: int = 3, seed: int = 1, partitions: int = 4
) -> dict[str, Any]:
    """Median over ``runs`` runs of each, on a fresh broker each, alternating (JSON, Avro) so
    that a busier moment of the machine falls on both."""
    plain, avro = [], []
    for i in range(runs):
        plain.append(one_run(records, seed + i, partitions, avro=False))
        avro.append(one_run(records, seed + i, partitions, avro=True))
    with_avro, with_json = medians(avro)["rate"], medians(plain)["rate"]
    return {
        "name": "avro_throughput",
        "records": records,
        "runs": runs,
        "partitions": partitions,
        "avro_throughput_rps": round(with_avro),
        "avro_throughput_ratio": round(with_avro / with_json, 3),
        "json_rps": round(with_json),
        "each_run": each_run(plain + avro),
    }


def report(m: dict[str, Any]) -> str:
    return (
        f"Avro inputs ({m['records']:,} records): {m['avro_throughput_rps']}/s, JSON "
        f"{m['json_rps']}/s (ratio {m['avro_throughput_ratio']})"
    )


BENCH = Bench(
    "avro_throughput",
    run,
    (RPS, RATIO),
    report=report,
    suite=lambda quick, runs: {"records": 5_000 if quick else 100_000, "runs": min(runs, 2)},
)

if __name__ == "__main__":
    raise SystemExit(BENCH.main())
