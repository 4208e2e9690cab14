"""The command line on archives: ``exact`` writes files, ``reconcile`` exits 0 only when the
stream's output equals the exact answer, ``backfill --dry-run`` lists the corrections.

The archives are what ``faust -A app.main archive`` writes (JSON lines of wire records); the
"stream output" is produced by the stream's own pure rules in a shuffled arrival order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from app.batch.cli import main
from app.batch.mood_joins import METHODS
from app.logic.car_join import CarArrival, ZoneReading, exact_car_view
from tests.harness import latest_by_id
from tests.oracle import Mood, Recommendation, exact_mood_joins
from tests.replay import MoodReplay
from tests.spark.test_car_view import stream_outputs

ARGS = ["--no-progress"]
ANSWER = ("id", "consultant", "event_time", "recommendation", "mood", "mood_event_time")


def write_lines(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def mood_inputs(seed: int = 3) -> tuple[list[Mood], list[Recommendation]]:
    rnd = random.Random(seed)
    moods = [
        Mood(rnd.choice("abc"), rnd.choice(["happy", "calm", "sad"]), rnd.randrange(40))
        for _ in range(25)
    ]
    recs = [
        Recommendation(
            rnd.choice("abc"), f"item{i % 4}", rnd.randrange(40), f"r{i}" if i % 3 else None
        )
        for i in range(30)
    ]
    return moods, recs


def stream_log(moods: list[Mood], recs: list[Recommendation], seed: int) -> list[dict[str, Any]]:
    """Every revision the stream's engine emits for one shuffled arrival order, in order."""
    arrivals: list[Mood | Recommendation] = [*moods, *recs]
    random.Random(seed).shuffle(arrivals)
    replay = MoodReplay()
    return [rev for item in arrivals for rev in replay.add(item)]


@pytest.fixture
def mood_archives(tmp_path: Path) -> dict[str, Any]:
    moods, recs = mood_inputs()
    log = stream_log(moods, recs, seed=9)
    assert any(r["revision"] > 1 for r in log), "the scenario needs corrections in the log"
    return {
        "moods": write_lines(
            tmp_path / "moods.jsonl",
            [{"name": m.name, "mood": m.mood, "event_time": m.event_time} for m in moods],
        ),
        "events": write_lines(
            tmp_path / "events.jsonl",
            [
                {
                    "consultant": r.consultant,
                    "recommendation": r.recommendation,
                    "event_time": r.event_time,
                    **({"id": r.id} if r.id else {}),
                }
                for r in recs
            ],
        ),
        "log": log,
        "expected": exact_mood_joins(moods, recs),
    }


@pytest.mark.parametrize("method", METHODS)
def test_exact_writes_the_exact_answer_as_json_lines_and_parquet(
    spark, mood_archives, tmp_path, method
):
    out = tmp_path / "joins.jsonl"
    assert (
        main(
            [
                "exact",
                "--moods",
                mood_archives["moods"],
                "--events",
                mood_archives["events"],
                "--out",
                str(out),
                "--method",
                method,
                *ARGS,
            ],
            spark=spark,
        )
        == 0
    )
    got = {
        r["id"]: (
            r["id"],
            r["consultant"],
            r["event_time"],
            r["recommendation"],
            r["mood"],
            r["mood_event_time"],
        )
        for r in read_lines(out)
    }
    assert got == mood_archives["expected"]

    parquet = tmp_path / "joins.parquet"
    assert (
        main(
            [
                "exact",
                "--moods",
                mood_archives["moods"],
                "--events",
                mood_archives["events"],
                "--out",
                str(parquet),
                *ARGS,
            ],
            spark=spark,
        )
        == 0
    )
    assert spark.read.parquet(str(parquet)).count() == len(mood_archives["expected"])


def test_reconcile_exits_0_on_the_stream_log_and_1_on_one_wrong_revision(
    spark, mood_archives, tmp_path, capsys
):
    log = mood_archives["log"]
    good = write_lines(tmp_path / "revisions.jsonl", log)
    inputs = ["--moods", mood_archives["moods"], "--events", mood_archives["events"]]
    assert main(["reconcile", *inputs, "--revisions", good, *ARGS], spark=spark) == 0
    report = capsys.readouterr().out
    assert f"matched {len(mood_archives['expected'])}  wrong 0  missing 0  extra 0" in report
    assert "OK" in report

    # one join's latest revision says another mood: a single wrong revision
    bad_log = [dict(r) for r in log]
    last = max(
        range(len(bad_log)), key=lambda i: (bad_log[i]["mood"] is not None, bad_log[i]["revision"])
    )
    bad_log[last]["mood"] = "furious"
    bad = write_lines(tmp_path / "bad.jsonl", bad_log)
    assert main(["reconcile", *inputs, "--revisions", bad, *ARGS], spark=spark) == 1
    report = capsys.readouterr().out
    assert "wrong 1  missing 0  extra 0" in report
    assert f"wrong   {bad_log[last]['id']}" in report and "'furious'" in report


def test_reconcile_report_names_each_difference_as_json_lines(
    spark, mood_archives, tmp_path, capsys
):
    """One wrong mood, one missing join, one extra join: the report's summary counts each kind,
    and each difference line carries the stream's latest revision and the exact answer."""
    log = [dict(r) for r in mood_archives["log"]]
    latest = latest_by_id(log)
    ids = sorted(latest)
    wrong_id, missing_id = ids[0], ids[1]
    wrong = dict(
        latest[wrong_id],
        revision=latest[wrong_id]["revision"] + 1,
        mood="furious",
        mood_event_time=1,
    )
    extra = dict(latest[ids[2]], id="zz-not-a-recommendation", revision=1)
    bad_log = [r for r in log if r["id"] != missing_id] + [wrong, extra]
    report = tmp_path / "report" / "reconcile.jsonl"
    args = [
        "reconcile",
        "--moods",
        mood_archives["moods"],
        "--events",
        mood_archives["events"],
        "--revisions",
        write_lines(tmp_path / "bad.jsonl", bad_log),
        "--report",
        str(report),
        "--examples",
        "1",
        *ARGS,
    ]
    assert main(args, spark=spark) == 1
    out = capsys.readouterr().out
    assert "NOT CONVERGED" in out and f"-> {report}" in out

    lines = read_lines(report)
    summary, diffs = lines[0], lines[1:]
    assert summary["kind"] == "summary" and summary["view"] == "mood_joins"
    assert summary["converged"] is False
    assert summary["counts"] == {
        "matched": len(mood_archives["expected"]) - 2,
        "wrong": 1,
        "missing": 1,
        "extra": 1,
    }
    by_status = {d["status"]: d for d in diffs}
    assert len(diffs) == 3 and all(d["kind"] == "difference" for d in diffs)
    expected = mood_archives["expected"]
    w = by_status["wrong"]
    assert w["id"] == wrong_id and w["stream"]["mood"] == "furious"
    assert w["stream"]["revision"] == wrong["revision"]
    assert tuple(w["exact"][c] for c in ANSWER) == expected[wrong_id]
    assert "mood" in w["fields"]
    m = by_status["missing"]
    assert m["id"] == missing_id and m["stream"] is None
    assert tuple(m["exact"][c] for c in ANSWER) == expected[missing_id]
    x = by_status["extra"]
    assert x["id"] == extra["id"] and x["exact"] is None and x["stream"]["revision"] == 1

    # the sample is bounded per kind; the counts are not
    assert main([*args, "--sample", "0"], spark=spark) == 1
    assert read_lines(report)[0]["counts"] == summary["counts"]
    assert len(read_lines(report)) == 1 + 3  # at least --examples per kind are kept

    # converged: exit 0 and a summary that says so
    good = write_lines(tmp_path / "good.jsonl", log)
    assert main([*args[:6], good, "--report", str(report), *ARGS], spark=spark) == 0
    assert read_lines(report) == [dict(read_lines(report)[0], converged=True)]
    assert read_lines(report)[0]["differences"] == 0
    assert "CONVERGED" in capsys.readouterr().out


def test_reconcile_the_car_view(spark, tmp_path, capsys):
    rnd = random.Random(4)
    cars = [
        CarArrival(rnd.randrange(6), rnd.randrange(4), rnd.choice([0.2, 0.7]), rnd.randrange(20))
        for _ in range(20)
    ]
    zones = [
        ZoneReading(rnd.randrange(4), rnd.choice([1.0, 2.5]), rnd.randrange(20)) for _ in range(12)
    ]
    outputs = [o.to_wire() for o in stream_outputs([*cars, *zones], seed=2).outputs]
    args = [
        "reconcile",
        "--cars",
        write_lines(
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
        "--zones",
        write_lines(
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
        *ARGS,
    ]
    good = write_lines(tmp_path / "car-pollution.jsonl", outputs)
    assert main([*args, "--car-pollution", good], spark=spark) == 0
    assert f"matched {len(exact_car_view(cars, zones))}  wrong 0" in capsys.readouterr().out

    # a consumer would miss the last output of one car: that car's view is stale or missing
    car = outputs[-1]["car_id"]
    dropped = [o for o in outputs if o["car_id"] != car]
    assert (
        main([*args, "--car-pollution", write_lines(tmp_path / "bad.jsonl", dropped)], spark=spark)
        == 1
    )
    assert f"missing car {car}:" in capsys.readouterr().out


def test_backfill_dry_run_continues_revision_numbers(spark, mood_archives, tmp_path, capsys):
    # a late batch: consultant "a" was "zen" from t=0 on (it wins the tie at t=0, if any)
    late_mood = Mood("a", "zen", 0)
    late = write_lines(tmp_path / "late.jsonl", [{"name": "a", "mood": "zen", "event_time": 0}])
    revisions = write_lines(tmp_path / "revisions.jsonl", mood_archives["log"])
    out = tmp_path / "backfill.jsonl"
    assert (
        main(
            [
                "backfill",
                "--moods",
                mood_archives["moods"],
                "--events",
                mood_archives["events"],
                "--revisions",
                revisions,
                "--late-moods",
                late,
                "--out",
                str(out),
                "--dry-run",
                *ARGS,
            ],
            spark=spark,
        )
        == 0
    )
    fixes = {f["id"]: f for f in read_lines(out)}

    moods, recs = mood_inputs()
    exact = exact_mood_joins([*moods, late_mood], recs)
    latest = latest_by_id(mood_archives["log"])
    changed = {jid for jid, r in latest.items() if exact[jid] != tuple(r[c] for c in ANSWER)}
    assert changed, "the scenario needs joins the late mood changes"
    assert set(fixes) == changed  # the joins whose answer changes, and only those
    for jid, f in fixes.items():
        assert tuple(f[c] for c in ANSWER) == exact[jid]
        assert f["revision"] == latest[jid]["revision"] + 1 and f["cause"] == "backfill"
        assert f["previous_mood"] == latest[jid]["mood"]
        assert f["partition"] is None  # outside every finality promise
    assert "dry run" in capsys.readouterr().out
