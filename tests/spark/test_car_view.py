"""The batch car view gives the stream's answer: a scenario, then a property over random data.

The property drives the stream's pure car-join rules (both sides, moves through per-partition
queues, as tests/unit/test_car_join_logic.py does) to get an output log, and checks that the batch
view equals the stream's exact view and that the batch consumer rule picks the same output.
"""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from app.batch.car_view import CAR_COLUMNS, car_view, compare_car_views, latest_car_outputs
from app.logic.car_join import CarArrival, ZoneReading, exact_car_view, newest_per_car
from tests.unit.test_car_join_logic import Cluster

ARRIVAL_DDL = "car_id bigint, to_zone_id bigint, fuel_level double, event_time bigint"
ZONE_DDL = "zone_id bigint, pollution_level double, event_time bigint"
OUT_DDL = (
    "car_id bigint, zone_id bigint, fuel_level double, pollution_level double, "
    "car_event_time bigint, zone_event_time bigint"
)


def test_latest_arrival_ties_and_zones_without_readings(spark):
    # 1. car 1: zone 2 at t=10, then zone 3 at t=5 arriving later (older: ignored)
    #    car 2: zones 4 and 5 both at t=7 (tie: the greater zone id, 5)
    #    car 3: zone 6 at t=8, fuel 0.2 and 0.9 (tie: the greater fuel level)
    #    car 4: zone 9, which never reports a pollution level
    arrivals = spark.createDataFrame(
        [
            (1, 2, 0.5, 10),
            (1, 3, 0.4, 5),
            (2, 4, 0.1, 7),
            (2, 5, 0.3, 7),
            (3, 6, 0.2, 8),
            (3, 6, 0.9, 8),
            (4, 9, 1.0, 1),
        ],
        ARRIVAL_DDL,
    )
    # 2. zone 2's latest level is 30 (t=12: after the car arrived — the view is "now");
    #    zone 5 has 7.0 and 8.0 at t=3 (tie: 8.0); zone 6 one reading; zone 3 is not used
    zones = spark.createDataFrame(
        [
            (2, 20.0, 1),
            (2, 30.0, 12),
            (5, 7.0, 3),
            (5, 8.0, 3),
            (6, 1.5, 2),
            (3, 99.0, 1),
        ],
        ZONE_DDL,
    )
    expected = spark.createDataFrame(
        [
            (1, 2, 0.5, 30.0, 10, 12),
            (2, 5, 0.3, 8.0, 7, 3),
            (3, 6, 0.9, 1.5, 8, 2),
            (4, 9, 1.0, None, 1, None),
        ],
        OUT_DDL,
    )
    assertDataFrameEqual(car_view(arrivals, zones), expected)


def test_comparison_finds_a_stale_output(spark):
    exact = spark.createDataFrame([(1, 2, 0.5, 30.0, 10, 12), (2, 5, 0.3, None, 7, None)], OUT_DDL)
    log = spark.createDataFrame(
        [
            (1, 2, 0.5, 20.0, 10, 1, 0),
            (1, 2, 0.5, 30.0, 10, 12, 1),  # car 1 ends right
            (2, 5, 0.3, None, 7, None, 2),
            (2, 4, 0.1, None, 6, None, 3),  # an older move, later
            (8, 1, 0.0, None, 1, None, 4),  # no such car: extra
        ],
        OUT_DDL + ", _pos bigint",
    )
    latest = latest_car_outputs(log)
    assert {r["car_id"]: (r["zone_id"], r["outputs"]) for r in latest.collect()} == {
        1: (2, 2),
        2: (5, 2),
        8: (1, 1),
    }
    statuses = dict(compare_car_views(exact, latest).select("car_id", "status").collect())
    assert statuses == {1: "matched", 2: "matched", 8: "extra"}


arrivals = st.builds(
    CarArrival,
    car_id=st.integers(0, 5),
    to_zone_id=st.integers(0, 4),
    fuel_level=st.sampled_from([0.1, 0.5, 0.9]),
    event_time=st.integers(0, 12),
)
readings = st.builds(
    ZoneReading,
    zone_id=st.integers(0, 4),
    pollution_level=st.sampled_from([1.0, 2.0, 3.0]),
    event_time=st.integers(0, 12),
)


def stream_outputs(records: list[CarArrival | ZoneReading], seed: int) -> Cluster:
    """The stream's rules in one random interleaving of inputs and move deliveries."""
    rnd = random.Random(seed)
    order = records[:]
    rnd.shuffle(order)
    c = Cluster(partitions=2)
    while order or c.busy():
        if order and (not c.busy() or rnd.random() < 0.5):
            rec = order.pop()
            c.arrive(rec) if isinstance(rec, CarArrival) else c.read(rec)
        else:
            c.deliver(rnd.choice(c.busy()))
    return c


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(arrivals, min_size=1, max_size=15),
    st.lists(readings, max_size=15),
    st.integers(0, 2**16),
)
def test_batch_view_and_consumer_rule_equal_the_stream(spark, cars, zones, seed):
    expected = exact_car_view(cars, zones)
    outputs = stream_outputs([*cars, *zones], seed).outputs
    assert newest_per_car(outputs) == expected  # the stream converged (its own property)

    view = car_view(
        spark.createDataFrame(
            [(a.car_id, a.to_zone_id, a.fuel_level, a.event_time) for a in cars], ARRIVAL_DDL
        ),
        spark.createDataFrame(
            [(z.zone_id, z.pollution_level, z.event_time) for z in zones], ZONE_DDL
        ),
    )
    rows = [tuple(o.to_wire()[c] for c in CAR_COLUMNS) for o in expected.values()]
    assertDataFrameEqual(view, spark.createDataFrame(rows, OUT_DDL))

    log = spark.createDataFrame(
        [(*(o.to_wire()[c] for c in CAR_COLUMNS), i) for i, o in enumerate(outputs)],
        OUT_DDL + ", _pos bigint",
    )
    assertDataFrameEqual(
        latest_car_outputs(log).drop("outputs"), spark.createDataFrame(rows, OUT_DDL)
    )


def _lines(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_the_batch_twin_computes_reconciles_and_backfills_foreign_key_joins_by_name(
    spark, tmp_path, capsys
):
    """``--join cars`` (the car join as a foreign-key spec) and a user's foreign-key spec of a
    joins file: exact, reconcile, backfill by name (app/batch/fk_jobs.py)."""
    from app.batch.cli import main

    rnd = random.Random(5)
    cars = [
        CarArrival(rnd.randrange(6), rnd.randrange(4), rnd.choice([0.2, 0.7]), rnd.randrange(20))
        for _ in range(20)
    ]
    zones = [
        ZoneReading(rnd.randrange(4), rnd.choice([1.0, 2.5]), rnd.randrange(20)) for _ in range(12)
    ]
    io = [
        "--join",
        "cars",
        "--no-progress",
        "--left",
        _lines(
            tmp_path / "cars.jsonl",
            [
                {
                    "car_id": a.car_id,
                    "to_zone_id": a.to_zone_id,
                    "fuel_level": a.fuel_level,
                    "event_time": a.event_time,
                }
                for a in cars
            ],
        ),
        "--right",
        _lines(
            tmp_path / "zones.jsonl",
            [
                {
                    "zone_id": z.zone_id,
                    "pollution_level": z.pollution_level,
                    "event_time": z.event_time,
                }
                for z in zones
            ],
        ),
    ]
    expected = {c: o.to_wire() for c, o in exact_car_view(cars, zones).items()}
    # 1. exact
    assert main(["exact", *io, "--out", str(tmp_path / "view.jsonl")], spark=spark) == 0
    assert {r["car_id"]: r for r in _read(tmp_path / "view.jsonl")} == expected
    # 2. reconcile: the stream's outputs converge; without one car's last output they do not
    outputs = [o.to_wire() for o in stream_outputs([*cars, *zones], seed=2).outputs]
    assert (
        main(
            ["reconcile", *io, "--revisions", _lines(tmp_path / "good.jsonl", outputs)], spark=spark
        )
        == 0
    )
    car = outputs[-1]["car_id"]
    dropped = [o for o in outputs if o["car_id"] != car]
    bad = _lines(tmp_path / "bad.jsonl", dropped)
    assert main(["reconcile", *io, "--revisions", bad], spark=spark) == 1
    assert f"missing car_id {car}:" in capsys.readouterr().out
    # 3. backfill: the exact row of that car, and nothing more; with it, the log converges
    fixes = tmp_path / "fixes.jsonl"
    assert (
        main(["backfill", *io, "--revisions", bad, "--dry-run", "--out", str(fixes)], spark=spark)
        == 0
    )
    assert _read(fixes) == [expected[car]]
    assert main(["reconcile", *io, "--revisions", bad, str(fixes)], spark=spark) == 0

    # 4. a user's spec by name (string keys; its archives are flat, as `archive` writes them)
    spec = {
        "kind": "foreign-key",
        "name": "orders",
        "left": {
            "topic": "o",
            "key": "order_id",
            "foreign_key": "customer.id",
            "time": "at",
            "fields": {"order_id": "str", "customer.id": "str", "amount": "float", "at": "time"},
            "copy": ["amount"],
            "time_as": "order_time",
        },
        "right": {
            "topic": "c",
            "key": "customer_id",
            "time": "at",
            "fields": {"customer_id": "str", "region": "str", "at": "time"},
            "copy": ["region"],
            "time_as": "region_time",
        },
        "output": "out",
        "moves": "moves",
        "ticks": "ticks",
    }
    joins = tmp_path / "joins.json"
    joins.write_text(json.dumps([spec]))
    assert (
        main(
            [
                "exact",
                "--join",
                "orders",
                "--joins-file",
                str(joins),
                "--no-progress",
                "--left",
                _lines(
                    tmp_path / "o.jsonl",
                    [
                        {"order_id": "o1", "customer_id": "c1", "amount": 1.0, "at": 10},
                        {"order_id": "o1", "customer_id": "c2", "amount": 1.0, "at": 20},
                        {"order_id": "o2", "customer_id": "c3", "amount": 2.0, "at": 5},
                    ],
                ),
                "--right",
                _lines(
                    tmp_path / "c.jsonl",
                    [
                        {"customer_id": "c2", "region": "eu", "at": 1},
                        {"customer_id": "c2", "region": "us", "at": 3},
                    ],
                ),
                "--out",
                str(tmp_path / "orders.jsonl"),
            ],
            spark=spark,
        )
        == 0
    )
    assert sorted(_read(tmp_path / "orders.jsonl"), key=lambda r: r["order_id"]) == [
        {
            "order_id": "o1",
            "customer_id": "c2",
            "amount": 1.0,
            "region": "us",
            "order_time": 20,
            "region_time": 3,
        },
        {
            "order_id": "o2",
            "customer_id": "c3",
            "amount": 2.0,
            "region": None,
            "order_time": 5,
            "region_time": None,
        },
    ]


def test_a_foreign_key_join_s_tombstones_in_its_archives_end_rows_and_delete_keys(spark, tmp_path):
    """A user's foreign-key spec (orders x customers' regions) with tombstones in its archives
    as the ``archive`` command writes them: a left key's end deletes its row, a right key's end
    answers null with its time; the output's deletes (and a stale output after one) read by
    the consumer rule; reconcile finds nothing to correct (app/batch/fk_view.py)."""
    from app.batch.archives import read_archive
    from app.batch.fk_jobs import fk_kinds
    from app.batch.fk_view import compare_fk_views, fk_view, latest_fk_outputs
    from app.joins.fk_spec import resolve_fk
    from tests.unit.test_fk_spec import orders

    spec = resolve_fk(orders(), 0)
    kinds = fk_kinds(spec)

    def archive(name: str, rows: list[dict]) -> str:
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    o = lambda k, c, amount, t: {"order_id": k, "customer_id": c, "amount": amount, "at": t}  # noqa: E731
    left = read_archive(
        spark,
        archive(
            "orders",
            [
                o("o1", "c1", 5.0, 10),
                {"order_id": "o1", "at": 20, "_end": True},  # o1 deleted at 20
                o("o2", "c1", 2.0, 10),
                o("o3", "c2", 1.0, 5),
                {"order_id": "o3", "at": 5, "_end": True},  # same time: the version wins
                {"at": 7, "_end": True},  # no key: dropped
            ],
        ),
        kinds[0],
    )
    right = read_archive(
        spark,
        archive(
            "customers",
            [
                {"customer_id": "c1", "region": "eu", "timestamp": 1},
                {"customer_id": "c1", "timestamp": 15, "_end": True},  # c1 has no region from 15
                {"customer_id": "c2", "region": "us", "timestamp": 1},
            ],
        ),
        kinds[1],
    )
    exact = {r["order_id"]: r.asDict() for r in fk_view(spec, left, right).collect()}
    assert exact == {
        "o2": {
            "order_id": "o2",
            "customer_id": "c1",
            "amount": 2.0,
            "region": None,
            "order_time": 10,
            "region_time": 15,
        },
        "o3": {
            "order_id": "o3",
            "customer_id": "c2",
            "amount": 1.0,
            "region": "us",
            "order_time": 5,
            "region_time": 1,
        },
    }
    out = lambda k, c, amount, t, region, rt: {  # noqa: E731
        "order_id": k,
        "customer_id": c,
        "amount": amount,
        "region": region,
        "order_time": t,
        "region_time": rt,
    }
    log = read_archive(
        spark,
        archive(
            "out",
            [
                out("o1", "c1", 5.0, 10, "eu", 1),
                {"_key": "o1", "_deleted_at": 20},  # the delete
                out("o1", "c1", 5.0, 10, "eu", 1),  # a stale output after it: older
                out("o2", "c1", 2.0, 10, "eu", 1),
                out("o2", "c1", 2.0, 10, None, 15),  # c1's end
                out("o3", "c2", 1.0, 5, "us", 1),
            ],
        ),
        kinds[2],
    )
    latest = latest_fk_outputs(spec, log)
    assert sorted(r["order_id"] for r in latest.collect()) == ["o2", "o3"]
    statuses = {
        r["status"] for r in compare_fk_views(spec, fk_view(spec, left, right), latest).collect()
    }
    assert statuses == {"matched"}


def test_a_backfill_deletes_a_key_whose_left_record_ended_as_the_stream_does(
    spark, tmp_path, names, capsys
):
    """A left key deleted in the archives (its greatest version an end) whose output stands in
    the log: the backfill publishes the delete as the stream writes one (a tombstone keyed by the
    left key, with ``etj-deleted-at``), and its ledger keeps it, so a second run sends nothing."""
    import asyncio

    from app.batch.cli import main
    from tests.broker.test_repartition_broker import read_raw
    from tests.unit.test_fk_spec import orders

    joins = tmp_path / "joins.json"
    joins.write_text(json.dumps([orders()]))
    topic, ledger = f"{names.prefix}-fk-backfill", tmp_path / "ledger.jsonl"
    o = {"customer_id": "c1", "amount": 5.0}
    row = {**o, "region": "eu", "region_time": 1}
    argv = [
        "backfill",
        "--join",
        "orders",
        "--joins-file",
        str(joins),
        "--no-progress",
        "--left",
        _lines(
            tmp_path / "orders.jsonl",
            [
                {"order_id": "o1", **o, "at": 10},
                {"order_id": "o1", "at": 20, "_end": True},  # o1 deleted at 20
                {"order_id": "o2", **o, "at": 10},
            ],
        ),
        "--right",
        _lines(tmp_path / "c.jsonl", [{"customer_id": "c1", "region": "eu", "timestamp": 1}]),
        "--revisions",
        _lines(
            tmp_path / "out.jsonl",
            [{"order_id": k, **row, "order_time": 10} for k in ("o1", "o2")],
        ),
        "--ledger",
        str(ledger),
        "--broker",
        names.env["ETJ_BROKER_URL"],
        "--topic",
        topic,
    ]
    assert main(argv, spark=spark) == 0
    assert "backfill order_id o1: deleted at 20" in capsys.readouterr().out
    assert [json.loads(x) for x in ledger.read_text().splitlines()] == [
        {"_key": "o1", "_deleted_at": 20}
    ]

    [tombstone] = asyncio.run(read_raw(names, topic))
    assert (tombstone.key, tombstone.value) == (b"o1", None)
    assert list(tombstone.headers) == [("etj-deleted-at", b"20")]
    assert main(argv, spark=spark) == 0  # the ledger holds the delete: nothing again
    assert "backfill: published 0 output(s)" in capsys.readouterr().out
    assert ledger.read_text().count("_key") == 1
