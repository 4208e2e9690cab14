"""What every benchmark shares: its declaration, its command line, the median over its runs.

A benchmark module declares itself once, as :class:`Bench` (``BENCH = Bench(...)``), with the
:class:`Figure` s it measures: each headline key of ``bench/results/latest.json``, where it
comes from and the goal it is held to, written next to the code that measures it (the module
also puts the goal in its own result, from the same declaration). ``python -m bench`` builds its
run, its headline keys, its ``goals`` and its table from these declarations, and
``python -m bench.<name>`` its command line from the module's ``run()``: before, every module
had its own argparse and median, and the runner kept four tables by hand beside them (what to
run, which keys, which goals, which report lines) that drifted from the modules.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tests.leftovers import whole_run

#: every benchmark's result by its name, as ``python -m bench`` collects them
Results = dict[str, Any]


@dataclass(frozen=True)
class Figure:
    """One headline key of ``latest.json`` and the goal it is held to (none: context only).

    ``of``: where the value is in the benchmark's result (default: the key itself), or a
    function of every benchmark's result (a figure over two benchmarks). ``direction``:
    ``">="``, ``"<="`` or ``"=="``. ``unit`` and ``note`` (the producer batching, the size...)
    are shown in the table only.
    """

    key: str
    of: str | Callable[[Results], Any] | None = None
    goal: int | float | None = None
    direction: str = ">="
    unit: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.direction not in (">=", "<=", "=="):
            raise ValueError(f"{self.key}: direction {self.direction!r}")

    def value(self, bench: str, results: Results) -> Any:
        if callable(self.of):
            return self.of(results)
        return (results.get(bench) or {}).get(self.of or self.key)

    @property
    def goal_text(self) -> str | None:
        """The goal as ``latest.json``'s ``goals`` says it: ``">= 0.8"``, ``"0"``."""
        if self.goal is None:
            return None
        return str(self.goal) if self.direction == "==" else f"{self.direction} {self.goal}"

    def met(self, value: Any) -> bool | None:
        """Whether ``value`` meets the goal; None without a goal or a value."""
        if self.goal is None or value is None:
            return None
        return {">=": value >= self.goal, "<=": value <= self.goal, "==": value == self.goal}[
            self.direction
        ]


@dataclass(frozen=True)
class Bench:
    """A benchmark: its ``run()`` (keyword arguments, full sizes by default, a dict of figures
    back), the headline figures it measures, ``suite(quick, runs)``: the arguments
    ``python -m bench`` runs it with (None: not part of it), ``report(result)``: lines for the
    table, and ``strict``: a goal not met is a failure (exit status 1), for the figures that
    are exactness, not speed."""

    name: str
    run: Callable[..., dict[str, Any]]
    figures: tuple[Figure, ...] = ()
    suite: Callable[[bool, int], dict[str, Any]] | None = None
    report: Callable[[dict[str, Any]], str] | None = None
    strict: bool = False

    def main(self, argv: list[str] | None = None) -> int:
        """``python -m bench.<name>``: one option per argument of ``run()`` with a default
        (``--batched-records``; a tuple comma-separated; a flag pair for a bool), its result as
        JSON, then its figures against their goals (``--json``: the JSON only)."""
        doc = (sys.modules[self.run.__module__].__doc__ or self.name).strip().splitlines()[0]
        p = argparse.ArgumentParser(prog=f"python -m bench.{self.name}", description=doc)
        for name, kind, default in options(self.run):
            flag = "--" + name.replace("_", "-")
            if kind is bool:
                p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
                continue
            if isinstance(default, tuple):
                default = ",".join(map(str, default))
                kind = tuple_of(kind)  # type: ignore[assignment]
            p.add_argument(flag, type=kind, default=default, help=f"default: {default or '-'}")
        p.add_argument("--json", action="store_true", help="print the result as JSON only")
        args = vars(p.parse_args(argv))
        only_json = args.pop("json")
        with whole_run(f"python -m bench.{self.name}"):
            result = self.run(**args)
        if only_json:
            print(json.dumps(result, default=str))
        else:
            print(json.dumps(result, indent=2, default=str))
            print()
            print(table([self], {self.name: result}))
        missed = [
            f.key for f in self.figures if f.met(f.value(self.name, {self.name: result})) is False
        ]
        return 1 if self.strict and missed else 0


def options(run: Callable[..., Any]) -> list[tuple[str, type, Any]]:
    """(name, type, default) of each argument of ``run`` the command line can set: those with a
    default of a plain type (int, float, str, bool) or a tuple of one; the type is the
    annotation's (``minutes: float = 10`` takes ``--minutes 0.5``)."""
    hints = typing.get_type_hints(run)
    out = []
    for name, param in inspect.signature(run).parameters.items():
        hint, default = hints.get(name), param.default
        if default is inspect.Parameter.empty or default is None:
            continue
        if typing.get_origin(hint) is tuple:
            kind = next(a for a in typing.get_args(hint) if a is not Ellipsis)
        elif hint in (int, float, str, bool):
            kind = hint
        else:
            continue
        out.append((name, kind, default))
    return out


def tuple_of(kind: type) -> Callable[[str], tuple[Any, ...]]:
    def parse(text: str) -> tuple[Any, ...]:
        return tuple(kind(x) for x in text.split(",") if x)

    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The median of every number over ``runs`` (one dict per run, the same keys): the figure
    a benchmark reports when single runs on a shared machine differ by a tenth and more."""
    return {
        k: statistics.median(r[k] for r in runs)
        for k, v in runs[0].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def each_run(runs: list[dict[str, Any]], digits: int = 3) -> list[dict[str, Any]]:
    """``runs`` as ``each_run`` shows them in a result: floats rounded."""
    return [
        {k: round(v, digits) if isinstance(v, float) else v for k, v in r.items()} for r in runs
    ]


def goals(benches: Iterable[Bench]) -> dict[str, str]:
    """``latest.json``'s ``goals``: key -> goal, for every figure that has one."""
    return {f.key: f.goal_text for b in benches for f in b.figures if f.goal_text is not None}


def table(benches: Iterable[Bench], results: Results, failed: Iterable[str] = ()) -> str:
    """Every figure of ``benches`` against its goal, then each benchmark's report lines."""
    benches, failed = list(benches), set(failed)
    rows = [("figure", "value", "goal", "", "")]
    for b in benches:
        for f in b.figures:
            value = f.value(b.name, results)
            shown = (
                "failed"
                if b.name in failed
                else "—"
                if value is None
                else (f"{value:g}" if isinstance(value, (int, float)) else str(value))
                + (f" {f.unit}" if f.unit else "")
            )
            verdict = {None: "", True: "met", False: "NOT met"}[f.met(value)]
            rows.append((f.key, shown, f.goal_text or "", verdict, f.note))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in width).rstrip())
    reports = [report(b, results[b.name]) for b in benches if b.report and results.get(b.name)]
    return "\n".join(lines + ([""] + reports if reports else []))


def report(bench: Bench, result: dict[str, Any]) -> str:
    """``bench``'s report lines; a report that fails says so (the figures are written by then,
    and the table is what a 25-minute run ends on)."""
    try:
        return bench.report(result)  # type: ignore[misc]
    except Exception as exc:
        return f"{bench.name}: no report ({exc!r})"
