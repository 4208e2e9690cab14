"""What ``reconcile`` says: a :class:`Report` per view, as text and as JSON lines.

Each line of the text names one difference the way a person checks it (``wrong   r7 (c,
t=31, 'item3'): expected mood 'sad'@29, revision 2 [late-dimension] says 'furious'@29``); the
JSON lines report (``--report``) carries the same differences as data: per view a summary, then
each sampled difference with the stream's latest and the exact answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from app.batch import spec_joins as S
from app.joins.spec import JoinSpec

STATUSES = ("matched", "wrong", "missing", "extra")
#: a join a bounded hold still holds at the archive's end: not missing, not a difference
HELD = "held"


@dataclass
class Report:
    """What ``reconcile`` found for one output: counts, examples, and contract notes.

    ``differences_sample``: up to a bound per kind, each difference as a dict (``status``, the
    key, ``stream``: what the consumer ends on, ``exact``: the exact answer, ``fields``: which
    fields differ) -- what :func:`write_report` writes as JSON lines.
    """

    title: str
    counts: dict[str, int]
    records: int  # records in the output archive
    examples: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # revision-log contract breaches
    differences_sample: list[dict[str, Any]] = field(default_factory=list)
    view: str = ""  # "mood_joins" / "car_view" / "joins:<spec name>"
    #: input -> records refused as from the future (not part of the exact answer)
    refused: dict[str, int] = field(default_factory=dict)

    @property
    def differences(self) -> int:
        return sum(self.counts.get(s, 0) for s in STATUSES[1:]) + len(self.problems)

    @property
    def converged(self) -> bool:
        return not self.differences

    def render(self) -> str:
        c = self.counts
        expected = c.get("matched", 0) + c.get("wrong", 0) + c.get("missing", 0)
        expected += c.get(HELD, 0)
        lines = [
            f"== {self.title}",
            f"   exact answer: {expected} · output archive: {self.records} records",
            "   " + "  ".join(f"{s} {c.get(s, 0)}" for s in STATUSES),
        ]
        if c.get(HELD):
            lines.append(
                f"   held {c[HELD]} (no version yet, still within hold_ms of the "
                "inputs' end: not missing)"
            )
        if any(self.refused.values()):
            lines.append(
                "   refused as from the future (not joined): "
                + ", ".join(f"{name} {n}" for name, n in self.refused.items())
            )
        lines += [f"   {e}" for e in self.examples]
        lines += [f"   PROBLEM {p}" for p in self.problems]
        lines.append(
            "   OK: the output equals the exact answer"
            if not self.differences
            else f"   DIFFERENT: {self.differences} difference(s)"
        )
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """The report's first JSON line: counts per kind, and whether the view converged."""
        return {
            "kind": "summary",
            "view": self.view,
            "title": self.title,
            "converged": self.converged,
            "differences": self.differences,
            "counts": {
                **{s: self.counts.get(s, 0) for s in STATUSES},
                **({HELD: self.counts[HELD]} if self.counts.get(HELD) else {}),
            },
            "output_records": self.records,
            "problems": self.problems,
            "refused_future": self.refused,
            "sampled": len(self.differences_sample),
        }


def write_report(path: str | Path, reports: Iterable[Report]) -> int:
    """Load: per view, its summary line then its sampled differences (JSON lines).

    Returns the number of lines written. Each difference line is ``{"kind": "difference",
    "view", "status", <key>, "stream", "exact", "fields"}``; ``stream`` is null for a missing
    join, ``exact`` for an extra one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with target.open("w", encoding="utf-8") as f:
        for report in reports:
            for line in [
                report.summary(),
                *(
                    {"kind": "difference", "view": report.view, **d}
                    for d in report.differences_sample
                ),
            ]:
                f.write(json.dumps(line, default=str) + "\n")
                n += 1
    return n


def count_statuses(comparison: DataFrame) -> dict[str, int]:
    return {r["status"]: r["count"] for r in comparison.groupBy("status").count().collect()}


def sample_rows(comparison: DataFrame, key: str, per_status: int) -> list[Any]:
    """Up to ``per_status`` rows of each non-matching status, in key order (one Spark job)."""
    from pyspark.sql import Window

    if per_status <= 0:
        return []
    w = Window.partitionBy("status").orderBy(key)
    return (
        comparison.where(~F.col("status").isin("matched", HELD))
        .withColumn("_n", F.row_number().over(w))
        .where(F.col("_n") <= per_status)
        .orderBy("status", key)
        .collect()
    )


def _as_dict(value: Any) -> dict[str, Any] | None:
    return None if value is None else value.asDict(recursive=True)


def difference(row: Any, key: str, compared: Sequence[str]) -> dict[str, Any]:
    """One non-matching comparison row as a JSON-able dict (see :class:`Report`)."""
    e, a = _as_dict(row["expected"]), _as_dict(row["actual"])
    fields = [c for c in compared if e[c] != a[c]] if e is not None and a is not None else []
    return {"status": row["status"], key: row[key], "stream": a, "exact": e, "fields": fields}


def _answer(values: Sequence[Any], t: Any) -> str:
    if t is None:
        return "null"
    shown = repr(values[0]) if len(values) == 1 else repr(tuple(values))
    return f"{shown}@{t}"


def describe_join(spec: JoinSpec, row: Any) -> str:
    """One difference as a line, e.g. ``wrong   r7 (c, t=31, 'item3'): expected mood
    'sad'@29, revision 2 [late-dimension] says 'furious'@29``."""
    e, a = row["expected"], row["actual"]
    head = e if e is not None else a
    dims, label = spec.dimension.copy, ", ".join(spec.dimension.copy)

    def said(v: Any) -> str:
        return _answer([v[f] for f in dims], v[spec.time_as])

    event = [
        repr(head[f]) if f != spec.events.key else str(head[f])
        for f in spec.events.copy
        if f != spec.events.time
    ]
    if spec.events.time in spec.events.copy:
        event.insert(1 if spec.events.key in spec.events.copy else 0, f"t={head[spec.events.time]}")
    what = f"{row['status']:<7} {row['id']} ({', '.join(event)}): "
    if row["status"] == "missing":
        return what + f"expected {label} {said(e)}, no revision"
    says = f"revision {a['revision']} [{a['cause']}] says {said(a)}"
    if row["status"] == "extra":
        return what + says + ", but no such event in the inputs"
    diff = [
        c for c in S.answer_columns(spec)[1:] if e[c] != a[c] and c not in (*dims, spec.time_as)
    ]
    extra = f" (also differs: {', '.join(diff)})" if diff else ""
    return what + f"expected {label} {said(e)}, {says}{extra}"


def view_names(spec: JoinSpec) -> tuple[str, str]:
    """(title, view) of a join's report; the mood join keeps the names it had."""
    if spec.name == "moods":
        return f"mood joins ({spec.output})", "mood_joins"
    return f"join {spec.name} ({spec.output})", f"joins:{spec.name}"


def first_per_status(rows: Sequence[Any], n: int) -> list[Any]:
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        seen[r["status"]] = seen.get(r["status"], 0) + 1
        if seen[r["status"]] <= n:
            out.append(r)
    return out


def describe_car(row: Any) -> str:
    e, a = row["expected"], row["actual"]

    def view(v: Any) -> str:
        return (
            f"zone {v['zone_id']} (car t={v['car_event_time']}), fuel {v['fuel_level']}, "
            f"pollution {v['pollution_level']} (zone t={v['zone_event_time']})"
        )

    what = f"{row['status']:<7} car {row['car_id']}: "
    if row["status"] == "missing":
        return what + "expected " + view(e) + ", no output"
    if row["status"] == "extra":
        return what + "output " + view(a) + ", but the car never arrived in the inputs"
    return what + "expected " + view(e) + "; latest output " + view(a)
