"""The batch as-of join: PySpark (the batch twin's own transform) vs DuckDB's ASOF JOIN.

Same data, same run, same answer: 2,000,000 recommendations x 200,000 moods of 1,000
consultants, written once as Parquet and read by both engines. Both compute the full rule of
DESIGN §2 — strictly-before, ties on mood time to the greatest mood, one row per join id — and
their results are compared (counts and checksums) before any figure is reported.

- PySpark: :func:`app.batch.mood_joins.mood_joins` (union + window ``last(ignorenulls)``),
  written to Spark's ``noop`` sink so the whole plan runs.
- DuckDB: ties resolved first (``arg_max`` per consultant and time), then ``ASOF LEFT JOIN`` on
  ``r.event_time > m.event_time``, materialised into a temporary table.

Each engine: one warm-up run (reported as "cold" for Spark: JVM start-up and JIT), then the best
of :data:`RUNS` — the machine is shared, the best run is the least disturbed one.

``python -m bench.spark_vs_duckdb`` (or ``python bench/spark_vs_duckdb.py``) prints the figures;
:func:`run` returns them for a ``python -m bench`` runner. Needs the ``batch`` and ``bench``
extras. Goal: Spark within 3x of DuckDB (a JVM engine built for clusters vs an in-process one).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GOAL_RATIO = 3.0
RUNS = 3  # timed runs per engine after a warm-up; the best one counts
MOODS = ["happy", "calm", "sad", "tired", "angry", "joyful", "bored", "excited"]  # distinct 1st
START_MS = 1_700_000_000_000
SPAN_MS = 30 * 24 * 3_600_000  # a month of event time


def make_data(folder: Path, recommendations: int, moods: int, consultants: int,
              seed: int) -> tuple[str, str]:
    """Random inputs as Parquet (wire-contract columns); some mood times collide (ties)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = np.array([f"c{i:04d}" for i in range(consultants)], dtype=object)
    # moods on a 1 s grid: same-millisecond ties happen, as they do in real feeds
    m_time = START_MS + rng.integers(0, SPAN_MS // 1000, moods) * 1000
    mood_table = pa.table({
        "name": names[rng.integers(0, consultants, moods)],
        "mood": np.array(MOODS, dtype=object)[rng.integers(0, len(MOODS), moods)],
        "event_time": m_time.astype("int64"),
    })
    r_time = START_MS + rng.integers(0, SPAN_MS, recommendations)
    rec_table = pa.table({
        "consultant": names[rng.integers(0, consultants, recommendations)],
        "recommendation": np.array([f"item{i}" for i in range(500)],
                                   dtype=object)[rng.integers(0, 500, recommendations)],
        "event_time": r_time.astype("int64"),
        "id": np.array([f"r{i}" for i in range(recommendations)], dtype=object),
    })
    moods_path, recs_path = str(folder / "moods.parquet"), str(folder / "events.parquet")
    pq.write_table(mood_table, moods_path)
    pq.write_table(rec_table, recs_path)
    return moods_path, recs_path


_CHECKSUM_SQL = ("count(*) AS rows, count(mood) AS joined, "
                 "coalesce(sum(mood_event_time), 0) AS time_sum, "
                 "coalesce(sum(ascii(mood)), 0) AS mood_sum")


def time_spark(moods_path: str, recs_path: str) -> tuple[float, float, dict[str, int]]:
    """(cold seconds, warm seconds, checksum) of the batch twin's as-of join."""
    from app.batch.mood_joins import mood_joins
    from app.batch.session import batch_session

    spark = batch_session("etj-bench-asof", "local[*]", progress=False, conf={
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": "4g",
        "spark.ui.enabled": "false",
    })
    spark.sparkContext.setLogLevel("ERROR")
    try:
        def once() -> float:
            out = mood_joins(spark.read.parquet(moods_path), spark.read.parquet(recs_path))
            t0 = time.perf_counter()
            out.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0

        cold = once()
        warm = min(once() for _ in range(RUNS))  # best of: other processes share the cores
        result = mood_joins(spark.read.parquet(moods_path), spark.read.parquet(recs_path))
        result.createOrReplaceTempView("result")
        row = spark.sql(f"SELECT {_CHECKSUM_SQL} FROM result").first()
        return cold, warm, {k: int(v) for k, v in row.asDict().items()}
    finally:
        spark.stop()


def time_duckdb(moods_path: str, recs_path: str) -> tuple[float, dict[str, int]]:
    """(seconds, checksum) of DuckDB's ASOF JOIN with the same rule."""
    import duckdb

    con = duckdb.connect()
    sql = f"""
        CREATE TEMP TABLE result AS
        WITH m AS (  -- tie rule: at one (consultant, time), the greatest mood
            SELECT name, event_time, max(mood) AS mood
            FROM read_parquet('{moods_path}') GROUP BY name, event_time),
        r AS (       -- one row per join id (a replayed record is one join)
            SELECT id, arg_max(consultant, event_time) AS consultant,
                   max(event_time) AS event_time,
                   arg_max(recommendation, event_time) AS recommendation
            FROM read_parquet('{recs_path}') GROUP BY id)
        SELECT r.id, r.consultant, r.event_time, r.recommendation, m.mood,
               m.event_time AS mood_event_time
        FROM r ASOF LEFT JOIN m
          ON r.consultant = m.name AND r.event_time > m.event_time  -- strictly before
    """
    seconds = float("inf")
    for _ in range(1 + RUNS):  # a warm-up, then the best of RUNS, as for Spark
        con.execute("DROP TABLE IF EXISTS result")
        t0 = time.perf_counter()
        con.execute(sql)
        seconds = min(seconds, time.perf_counter() - t0)
    names = ["rows", "joined", "time_sum", "mood_sum"]
    values = con.execute(f"SELECT {_CHECKSUM_SQL} FROM result").fetchone()
    con.close()
    return seconds, dict(zip(names, (int(v) for v in values)))


def run(recommendations: int = 2_000_000, moods: int = 200_000, consultants: int = 1_000,
        seed: int = 1) -> dict[str, Any]:
    """Run both engines on the same data; the figures as a dict (for ``python -m bench``)."""
    folder = Path(tempfile.mkdtemp(prefix="etj-bench-asof-"))
    try:
        moods_path, recs_path = make_data(folder, recommendations, moods, consultants, seed)
        duck_s, duck_sum = time_duckdb(moods_path, recs_path)
        spark_cold_s, spark_s, spark_sum = time_spark(moods_path, recs_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if duck_sum != spark_sum:
        raise AssertionError(f"engines disagree: spark {spark_sum} vs duckdb {duck_sum}")
    return {
        "name": "spark_vs_duckdb_asof",
        "recommendations": recommendations, "moods": moods, "consultants": consultants,
        "joined": spark_sum["joined"],
        "spark_cold_s": round(spark_cold_s, 3), "spark_s": round(spark_s, 3),
        "duckdb_s": round(duck_s, 3), "ratio": round(spark_s / duck_s, 2),
        "goal_ratio": GOAL_RATIO, "goal_met": spark_s / duck_s <= GOAL_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recommendations", type=int, default=2_000_000)
    p.add_argument("--moods", type=int, default=200_000)
    p.add_argument("--consultants", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    a = p.parse_args(argv)
    r = run(a.recommendations, a.moods, a.consultants, a.seed)
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"as-of join, {r['recommendations']:,} recommendations x {r['moods']:,} moods "
          f"({r['consultants']:,} consultants), {r['joined']:,} joined; same answer in both")
    print(f"  PySpark (union + window last)  {r['spark_s']:7.2f} s warm "
          f"({r['spark_cold_s']:.2f} s cold)")
    print(f"  DuckDB ASOF JOIN               {r['duckdb_s']:7.2f} s")
    print(f"  ratio Spark/DuckDB             {r['ratio']:7.2f}  (goal <= {GOAL_RATIO:g}: "
          f"{'met' if r['goal_met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
