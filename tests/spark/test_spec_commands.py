"""The command line for any join by name: ``--join movies``, ``--join clicks`` from a joins file;
records from the future refused and counted; an event-time range (``--from``/``--to``).

Archives are JSON lines as ``faust -A app.main archive`` writes them (wire fields, plus each
record's Kafka timestamp as ``_timestamp``); expected answers come from tests/oracle.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.batch.cli import main
from app.joins.catalog import movie_spec
from app.joins.resolve import resolve
from app.joins.spec import JoinSpec
from app.settings import Settings
from tests.oracle import Event, exact_answer
from tests.spark.test_commands import read_lines, write_lines
from tests.spark.test_spec_joins import Click, click_spec

ARGS = ["--no-progress"]
NOW = 1_790_000_000_000


def log_of(
    spec: JoinSpec, expected: dict[str, tuple[Any, ...]], fields: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """A revision log that ends on ``expected``: per join a first answer of null (revision 1,
    what a left join says before its version arrives), then the exact one (revision 2)."""
    out = []
    for jid, (_, key, t, payload, answer, answer_t) in expected.items():
        event = dict(zip(fields["events"], (key, t, *payload)))
        dims = spec.dimension.copy
        first = {
            "id": jid,
            **event,
            **dict.fromkeys(dims),
            spec.time_as: None,
            "revision": 1,
            **{f"previous_{f}": None for f in dims},
            "cause": "arrival",
        }
        out.append(first)
        out.append(
            {
                **first,
                **dict(zip(dims, answer or (None,) * len(dims))),
                spec.time_as: answer_t,
                "revision": 2,
                "cause": "late-dimension",
            }
        )
    return out


def batch_answers(
    spec: JoinSpec, rows: list[dict[str, Any]], key: str, time: str, payload: list[str]
) -> dict[str, tuple[Any, ...]]:
    dims = spec.dimension.copy
    return {
        r["id"]: (
            r["id"],
            r[key],
            r[time],
            tuple(r[p] for p in payload),
            None if r[spec.time_as] is None else tuple(r[d] for d in dims),
            r[spec.time_as],
        )
        for r in rows
    }


# --- a join of the user's own, from a joins file -------------------------------------------

CLICKS = [
    Click("ann", 10, 0.1, True, None, None),
    Click("ann", 20, 1e-05, False, "x", "c2"),
    Click("ann", 30, 2.0, True, None, None),
    Click("bob", 5, 1e16, False, None, "b1"),
    Click("zoë", 7, 3.0, True, "None", ""),
]
LEVELS = [
    ("ann", 15, 1, "lo"),
    ("ann", 20, 2, "hi"),
    ("ann", 20, 2, "lo"),  # a tie at 20
    ("bob", 9, 0, "lo"),
]  # bob's only level is after his click: the earliest one


def clicks_join(tmp_path: Path, asof: str, mode: str) -> tuple[Path, JoinSpec]:
    """A joins file holding the clicks spec with this rule and mode, and the spec resolved."""
    raw = click_spec(asof, mode)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([raw]))
    return path, resolve(raw)


def click_archives(tmp_path: Path, stamps: dict[int, int] | None = None) -> tuple[str, str]:
    stamps = stamps or {}
    events = [
        {
            k: v
            for k, v in {
                "cid": c.cid,
                "user": c.user,
                "at": c.at,
                "score": c.score,
                "flag": c.flag,
                "note": c.note,
            }.items()
            if v is not None
        }
        for c in CLICKS
    ]
    levels = [
        {"user": u, "at": t, "level": lv, "label": lb, "_timestamp": stamps.get(t, NOW)}
        for u, t, lv, lb in LEVELS
    ]
    return (
        write_lines(tmp_path / "clicks.jsonl", events),
        write_lines(tmp_path / "levels.jsonl", levels),
    )


def test_exact_and_reconcile_a_join_from_a_joins_file(spark, tmp_path, capsys):
    joins_file, spec = clicks_join(tmp_path, "at-or-before-else-earliest", "inner")
    events, levels = click_archives(tmp_path)
    expected = exact_answer(spec.rules, [(u, [t, lv, lb]) for u, t, lv, lb in LEVELS], CLICKS)
    assert expected[CLICKS[3].id][4] == (0, "lo")  # bob: before every level -> the earliest
    assert expected[CLICKS[1].id][4] == (2, "lo"), "ann at 20: the tie at 20, greatest values"
    join = [
        "--join",
        "clicks",
        "--joins-file",
        str(joins_file),
        "--events",
        events,
        "--dimension",
        levels,
        "--now",
        str(NOW),
        *ARGS,
    ]

    # 1. exact: the oracle's answer, as wire fields
    out = tmp_path / "answer.jsonl"
    assert main(["exact", *join, "--out", str(out)], spark=spark) == 0
    rows = read_lines(out)
    assert list(rows[0]) == [
        "id",
        "user",
        "at",
        "score",
        "flag",
        "note",
        "level",
        "label",
        "level_at",
    ]
    assert batch_answers(spec, rows, "user", "at", ["score", "flag", "note"]) == expected

    # 2. reconcile: a log that ends on the exact answer converges; one tampered revision not
    fields = {"events": ["user", "at", "score", "flag", "note"]}
    log = log_of(spec, expected, fields)
    good = write_lines(tmp_path / "out.jsonl", log)
    assert main(["reconcile", *join, "--revisions", good], spark=spark) == 0
    text = capsys.readouterr().out
    assert "== join clicks (t-clicks-out)" in text
    assert f"matched {len(expected)}  wrong 0  missing 0  extra 0" in text
    tampered = [*log, {**log[-1], "label": "gold", "revision": 3}]
    bad = write_lines(tmp_path / "bad.jsonl", tampered)
    assert main(["reconcile", *join, "--revisions", bad], spark=spark) == 1
    text = capsys.readouterr().out
    assert "wrong 1" in text and "'gold'" in text and "NOT CONVERGED" in text

    # 3. an unknown join is refused with the names that exist
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "exact",
                "--join",
                "click",
                "--joins-file",
                str(joins_file),
                "--events",
                events,
                "--dimension",
                levels,
                "--out",
                str(out),
                *ARGS,
            ],
            spark=spark,
        )
    assert exc.value.code == 2
    assert "unknown join 'click'" in capsys.readouterr().err


def test_the_built_in_movies_join_by_name(spark, tmp_path, capsys):
    spec = resolve(movie_spec(Settings()))
    movies = [("m1", "Alien (draft)", 100), ("m1", "Alien", 200), ("m2", "Heat", 500)]
    ratings = [
        ("r1", "m1", "u1", 4.0, 50),
        ("r2", "m1", "u2", 3.5, 200),
        ("r3", "m1", "u1", 5.0, 250),
        ("r4", "m3", "u3", 1.0, 10),
    ]  # m3: no movie

    events = [Event(m, i, t, (u, r)) for i, m, u, r, t in ratings]
    expected = exact_answer(spec.rules, [(m, [t, title]) for m, title, t in movies], events)
    assert "r4" not in expected and expected["r1"][4] == ("Alien (draft)",)  # inner; earliest
    args = [
        "--join",
        "movies",
        "--events",
        write_lines(
            tmp_path / "ratings.jsonl",
            [
                {"id": i, "movie_id": m, "user_id": u, "rating": r, "event_time": t}
                for i, m, u, r, t in ratings
            ],
        ),
        "--dimension",
        write_lines(
            tmp_path / "movies.jsonl",
            [{"movie_id": m, "title": title, "event_time": t} for m, title, t in movies],
        ),
        *ARGS,
    ]
    out = tmp_path / "rated.jsonl"
    assert main(["exact", *args, "--out", str(out)], spark=spark) == 0
    got = batch_answers(spec, read_lines(out), "movie_id", "event_time", ["user_id", "rating"])
    assert got == expected

    # backfill (dry run): a log that never answered r3 gets its revision 1
    log = [
        r
        for r in log_of(spec, expected, {"events": ["movie_id", "event_time", "user_id", "rating"]})
        if r["id"] != "r3"
    ]
    fixes = tmp_path / "fixes.jsonl"
    assert (
        main(
            [
                "backfill",
                *args,
                "--revisions",
                write_lines(tmp_path / "log.jsonl", log),
                "--out",
                str(fixes),
                "--dry-run",
            ],
            spark=spark,
        )
        == 0
    )
    [fix] = read_lines(fixes)
    assert (fix["id"], fix["title"], fix["revision"], fix["cause"]) == (
        "r3",
        "Alien",
        1,
        "backfill",
    )
    assert "backfill r3 revision 1: title None -> 'Alien'" in capsys.readouterr().out


# --- records from the future -----------------------------------------------------------------


def test_records_from_the_future_are_refused_counted_and_the_rest_is_exact(spark, tmp_path, capsys):
    """ann's level at 20 was produced at 20 - 6 (Kafka timestamp): 6 ahead of its own timestamp,
    past a tolerance of 5, refused; bob's click at NOW + 9 has no timestamp: held against the
    clock, refused. Everything else is joined, as the oracle joins the records left."""
    joins_file, spec = clicks_join(tmp_path, "before", "left")
    late_click = Click("bob", NOW + 9, 1.0, True, None, "future")
    events = [*CLICKS, late_click]
    stamps = {20: 14, 15: 15, 9: 9}  # ann@20 stamped 14: 6 ahead of it
    levels = [
        {"user": u, "at": t, "level": lv, "label": lb, "_timestamp": stamps[t]}
        for u, t, lv, lb in LEVELS
    ]
    ev = write_lines(
        tmp_path / "clicks.jsonl",
        [
            {
                "cid": c.cid,
                "user": c.user,
                "at": c.at,
                "score": c.score,
                "flag": c.flag,
                "note": c.note,
                "_timestamp": None if c is late_click else c.at,
            }
            for c in events
        ],
    )
    join = [
        "--join",
        "clicks",
        "--joins-file",
        str(joins_file),
        "--events",
        ev,
        "--dimension",
        write_lines(tmp_path / "levels.jsonl", levels),
        "--now",
        str(NOW),
        "--max-future-ms",
        "5",
        *ARGS,
    ]
    out = tmp_path / "answer.jsonl"
    assert main(["exact", *join, "--out", str(out)], spark=spark) == 0
    assert (
        "refused as from the future (not joined): events 1, dimension 2" in capsys.readouterr().out
    )  # both versions of ann at 20 (the tie) were stamped 14

    kept = [(u, [t, lv, lb]) for u, t, lv, lb in LEVELS if t != 20]
    expected = exact_answer(spec.rules, kept, CLICKS)
    got = batch_answers(spec, read_lines(out), "user", "at", ["score", "flag", "note"])
    assert got == expected
    assert got[CLICKS[2].id][4] == (1, "lo")  # ann at 30: the level at 15, not the refused 20

    # a wider tolerance admits them all; reconcile reports what it refused in its summary
    assert (
        main(["exact", *join[:-3], "--max-future-ms", "10", *ARGS, "--out", str(out)], spark=spark)
        == 0
    )
    assert len(read_lines(out)) == len(events)
    report = tmp_path / "report.jsonl"
    log = write_lines(
        tmp_path / "log.jsonl",
        log_of(spec, expected, {"events": ["user", "at", "score", "flag", "note"]}),
    )
    assert main(["reconcile", *join, "--revisions", log, "--report", str(report)], spark=spark) == 0
    assert read_lines(report)[0]["refused_future"] == {"events": 1, "dimension": 2}


# --- an event-time range -----------------------------------------------------------------------


def test_a_range_reconciles_its_events_with_versions_from_before_it(spark, tmp_path, capsys):
    """Reconcile [20, 30): ann's click at 20 joins her level at 15, from before the range; a
    wrong revision of a join outside the range does not count; the same log over all time is
    not converged."""
    joins_file, spec = clicks_join(tmp_path, "before", "left")
    events, levels = click_archives(tmp_path)
    every = exact_answer(spec.rules, [(u, [t, lv, lb]) for u, t, lv, lb in LEVELS], CLICKS)
    in_range = {k: v for k, v in every.items() if 20 <= v[2] < 30}
    assert list(in_range) == [CLICKS[1].id] and in_range[CLICKS[1].id][4] == (1, "lo")

    log = log_of(spec, every, {"events": ["user", "at", "score", "flag", "note"]})
    outside = next(r for r in reversed(log) if r["at"] == 30)
    log.append({**outside, "label": "gold", "revision": 3})  # wrong, but at 30: outside
    revisions = write_lines(tmp_path / "out.jsonl", log)
    join = [
        "--join",
        "clicks",
        "--joins-file",
        str(joins_file),
        "--events",
        events,
        "--dimension",
        levels,
        "--revisions",
        revisions,
        *ARGS,
    ]
    assert main(["reconcile", *join, "--from", "20", "--to", "30"], spark=spark) == 0
    assert "matched 1  wrong 0  missing 0  extra 0" in capsys.readouterr().out
    assert main(["reconcile", *join], spark=spark) == 1
    assert "wrong 1" in capsys.readouterr().out

    # ISO dates are accepted too (epoch 0 .. 1970-01-01: everything, here)
    out = tmp_path / "answer.jsonl"
    assert (
        main(
            [
                "exact",
                *join[:8],
                "--from",
                "1970-01-01T00:00:00.020Z",
                "--to",
                "30",
                "--out",
                str(out),
                *ARGS,
            ],
            spark=spark,
        )
        == 0
    )
    assert [r["id"] for r in read_lines(out)] == [CLICKS[1].id]
