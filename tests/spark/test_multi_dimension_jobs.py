"""The batch twin of a spec with several dimensions (app/batch/multi_jobs.py): ``exact``,
``reconcile`` and ``backfill`` of orders × customer tiers × product prices (inner) × currency
rates, by name from a joins file, each dimension's archive given as ``--dimension NAME=PATH``.

The archives are JSON lines as ``faust -A app.main archive`` writes them (wire fields and
``_timestamp``; a tombstone as an end row). The expected answer is the oracle's, each dimension
answered on its own (tests/oracle.py) and combined by id, as the broker test of the chain
(tests/broker/test_multi_dimension_broker.py) holds the stream to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.batch.cli import main
from app.joins.catalog import batch_multi_specs
from app.settings import Settings
from tests.broker.test_multi_dimension_broker import ANSWER, KEYS, SAID, traffic
from tests.oracle import Event, exact_answer
from tests.spark.test_commands import read_lines, write_lines
from tests.unit.test_dimensions import orders

NOW = 1_800_000_000_000
ARGS = ["--no-progress", "--now", str(NOW)]


def archives(tmp_path: Path) -> tuple[list[str], dict[str, Any], dict[str, tuple[Any, ...]]]:
    """(the command's join options, the multi spec, the oracle's answer by order id)."""
    joins_file = tmp_path / "joins.json"
    joins_file.write_text(json.dumps([orders()]))
    multi = batch_multi_specs(Settings(joins_file=joins_file))["enriched"]
    events, versions = traffic(seed=58)
    ev = write_lines(tmp_path / "orders.jsonl", [{**v, "_timestamp": at} for _, v, at in events])
    dims = []
    for d in KEYS:
        rows = [
            {d: k.decode(), "at": at, "_end": True, "_timestamp": at}
            if v is None
            else {**v, "_timestamp": at}
            for k, v, at in versions[d]
        ]
        dims.append(f"{d}={write_lines(tmp_path / f'{d}.jsonl', rows)}")
    specs = dict(multi.dimensions)
    each = {
        d: exact_answer(
            specs[d].rules,
            [(k.decode(), [at] if v is None else [at, v[ANSWER[d]]]) for k, v, at in versions[d]],
            [Event(v[d], v["id"], at) for _, v, at in events],
        )
        for d in KEYS
    }

    def said(d: str, i: str) -> tuple[Any, Any]:
        e = each[d][i]
        return (e[4] and e[4][0], e[5])

    expected = {
        i: (*said("customer", i), *said("product", i), *said("currency", i))
        for i in each["product"]
    }
    join = [
        "--join",
        "enriched",
        "--joins-file",
        str(joins_file),
        "--events",
        ev,
        "--dimension",
        *dims,
        *ARGS,
    ]
    return join, {"multi": multi, "events": events}, expected


def log_of(multi: Any, exact_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A revision log that ends on ``exact_rows``: one revision per order, as the chain's
    first revision says it."""
    out = []
    for r in exact_rows:
        rev = dict.fromkeys(multi.last.output_fields)
        rev.update(r)
        rev.update(revision=1, cause="arrival", customer_cause="arrival", product_cause="arrival")
        out.append(rev)
    return out


def test_exact_reconcile_and_backfill_of_three_dimensions(spark, tmp_path, capsys):
    join, ctx, expected = archives(tmp_path)
    multi = ctx["multi"]
    assert 0 < len(expected) < len(ctx["events"])  # some orders have no price: inner

    # 1. exact: each dimension's as-of answer, combined by id; inner drops the unpriced
    out = tmp_path / "answer.jsonl"
    assert main(["exact", *join, "--out", str(out)], spark=spark) == 0
    rows = read_lines(out)
    assert list(rows[0]) == list(multi.columns)
    assert {r["id"]: tuple(r[f] for f in SAID) for r in rows} == expected
    assert any(r["tier"] is None for r in rows), "the ends and early orders: no tier"

    # 2. reconcile: a log ending on the exact answer converges; one tampered answer does not
    log = log_of(multi, rows)
    good = write_lines(tmp_path / "out.jsonl", log)
    assert main(["reconcile", *join, "--revisions", good], spark=spark) == 0
    text = capsys.readouterr().out
    assert f"matched {len(expected)}  wrong 0  missing 0  extra 0" in text
    ids = sorted(expected)
    wrong_tier, dropped = ids[0], ids[1]
    unpriced = next(v["id"] for _, v, _ in ctx["events"] if v["id"] not in expected)
    bad = [
        *(r for r in log if r["id"] != dropped),
        {**next(r for r in log if r["id"] == wrong_tier), "tier": "zz", "revision": 2},
        {**log[0], "id": unpriced, "price": "p", "price_time": 1},  # a price an end took
    ]
    bad_path = write_lines(tmp_path / "bad.jsonl", bad)
    assert main(["reconcile", *join, "--revisions", bad_path], spark=spark) == 1
    text = capsys.readouterr().out
    assert "wrong 1" in text and "missing 1" in text and "extra 1" in text, text
    assert "'zz'" in text and "NOT CONVERGED" in text

    # 3. backfill: the revisions that take that log to the exact answer, each saying which
    # dimension changed and from what; with them the log converges
    found = tmp_path / "backfill.jsonl"
    argv = ["backfill", *join, "--revisions", bad_path, "--dry-run", "--out", str(found)]
    assert main(argv, spark=spark) == 0
    revs = {r["id"]: r for r in read_lines(found)}
    assert set(revs) == {wrong_tier, dropped, unpriced}
    fixed = revs[wrong_tier]
    assert (fixed["revision"], fixed["cause"], fixed["dimension"]) == (3, "backfill", "customer")
    assert (fixed["previous_tier"], fixed["customer_cause"]) == ("zz", "backfill")
    assert tuple(fixed[f] for f in SAID) == expected[wrong_tier]
    assert (revs[dropped]["revision"], revs[dropped]["dimension"]) == (1, None)
    gone = revs[unpriced]
    assert (gone["price"], gone["price_time"], gone["previous_price"]) == (None, None, "p")
    assert (gone["revision"], gone["dimension"]) == (2, "product")
    healed = write_lines(tmp_path / "healed.jsonl", [*bad, *revs.values()])
    assert main(["reconcile", *join, "--revisions", healed], spark=spark) == 0
    assert "extra 0" in capsys.readouterr().out


def test_each_dimension_s_archives_are_named(spark, tmp_path, capsys):
    join, _, _ = archives(tmp_path)
    at = join.index("--dimension")
    for given, says in (
        ([join[at + 1].split("=", 1)[1]], "give each one's archives as --dimension NAME=PATH"),
        ([join[at + 1], join[at + 2]], "no archive for dimension(s) currency"),
    ):
        argv = [*join[:at], "--dimension", *given, *join[at + 4 :], "--out", str(tmp_path / "x")]
        with pytest.raises(SystemExit) as exc:
            main(["exact", *argv], spark=spark)
        assert exc.value.code == 2
        assert says in capsys.readouterr().err
