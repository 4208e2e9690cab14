"""The Grafana dashboard shipped in the chart asks only for metrics the worker exports.

A dashboard that names a metric nobody exports draws an empty panel and says nothing — the
classic slip is a counter without its ``_total`` suffix. So every PromQL expression of the
dashboard (panels and template variables) is parsed; each metric it names must be one the
Prometheus registry holds after ``import app.main`` (as exposed: counters with ``_total``), and
each label it groups or filters by must be a label of one of those metrics (or a label
Prometheus adds to every scraped series).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DASHBOARD = Path(__file__).resolve().parents[2] / "helm/etj/files/grafana-dashboard.json"

#: PromQL functions and aggregations the dashboard may call (a typo here is an empty panel too)
FUNCTIONS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "bottomk",
    "quantile",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "time",
    "timestamp",
    "clamp_min",
    "clamp_max",
    "abs",
    "histogram_quantile",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "vector",
    "scalar",
    "absent",
    "changes",
    "resets",
    "label_replace",
}
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
}
#: labels Prometheus (or its Kubernetes discovery) attaches to every scraped series
TARGET_LABELS = {"job", "instance", "pod", "namespace", "container", "service", "endpoint"}


#: the series a metric family of each type is exposed as (text format 0.0.4)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "unknown": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
}


def exported() -> dict[str, set[str]]:
    """Every series name the worker exposes -> its labels, from the registry after importing
    app.main. A labelled metric with no child yet has no sample, so names come from the
    family's type (a counter ``x`` is exposed as ``x_total``, never as ``x``)."""
    from prometheus_client import REGISTRY

    import app.main  # noqa: F401  (registers every metric of the worker)

    out: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        collector = REGISTRY._names_to_collectors.get(family.name)
        labels = set(getattr(collector, "_labelnames", ()))
        series = {family.name + s for s in SUFFIXES[family.type]}
        for sample in family.samples:
            series.add(sample.name)
            labels |= set(sample.labels)
        for name in series:
            out.setdefault(name, set()).update(
                labels | ({"le"} if name.endswith("_bucket") else set())
            )
    return out


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target (rows' nested panels too) and query variable."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dashboard["panels"]):
        for t in p.get("targets", []):
            yield f"panel {p['title']!r} target {t['refId']}", t["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*", query)
            assert m, f"variable {var['name']}: only label_values(metric, label) is checked"
            yield f"variable {var['name']}", f"max by ({m.group(2)}) ({m.group(1)})"


def parse(expr: str) -> tuple[set[str], set[str], set[str]]:
    """(metric names, label names, function names) used by a PromQL expression."""
    labels = set()
    e = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
    for matchers in re.findall(r"\{([^}]*)\}", e):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    for grouping in re.findall(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e
    ):
        labels |= {x.strip() for x in grouping.split(",") if x.strip()}
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    metrics, functions = set(), set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", e):
        token = m.group()
        if e[m.end() :].lstrip().startswith("("):
            functions.add(token)
        elif token not in KEYWORDS:
            metrics.add(token)
    return metrics, labels, functions


def problems(dashboard: dict[str, Any], names: dict[str, set[str]]) -> list[str]:
    """What in ``dashboard`` asks for something the worker does not export."""
    out = []
    for where, expr in expressions(dashboard):
        metrics, labels, functions = parse(expr)
        if not metrics:
            out.append(f"{where}: no metric in {expr!r}")
        for name in sorted(metrics - set(names)):
            out.append(f"{where}: metric {name!r} is not exported by the worker")
        known = set().union(*(names.get(n, set()) for n in metrics)) | TARGET_LABELS
        for label in sorted(labels - known):
            out.append(f"{where}: label {label!r} is on none of {sorted(metrics)}")
        for fun in sorted(functions - FUNCTIONS):
            out.append(f"{where}: {fun}() is not a PromQL function the check knows")
    return out


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def names() -> dict[str, set[str]]:
    return exported()


def test_every_metric_and_label_the_dashboard_asks_for_is_exported(dashboard, names):
    assert problems(dashboard, names) == []


def test_the_check_catches_what_an_empty_panel_would_hide(dashboard, names):
    def broken(expr: str) -> dict[str, Any]:
        copy = json.loads(json.dumps(dashboard))
        copy["panels"][1]["targets"][0]["expr"] = expr
        return copy

    assert names["etj_records_in_total"] == {"join", "topic"}
    assert problems(broken("sum(rate(etj_records_in[5m]))"), names)  # counter without _total
    assert problems(broken("sum(rate(etj_recrods_in_total[5m]))"), names)  # typo
    assert problems(broken("sum by (cause) (rate(etj_records_in_total[5m]))"), names)  # label
    assert problems(broken('sum(rate(etj_records_in_total{topc="x"}[5m]))'), names)
    assert problems(broken("sum(rat(etj_records_in_total[5m]))"), names)  # function
    assert problems(broken("up"), names)  # not the worker's
    assert not problems(
        broken('sum by (topic) (rate(etj_records_in_total{job=~"$job"}[5m]))'), names
    )


def test_dashboard_covers_what_an_operator_watches(dashboard):
    exprs = dict(expressions(dashboard))
    text = "\n".join(exprs.values())
    # throughput, corrections/s, late and dead-letter rates, stream-time lag per partition,
    # state sizes
    assert re.search(r"rate\(etj_records_in_total", text)
    assert re.search(r'rate\(etj_revisions_total\{[^}]*cause!="arrival"', text)
    assert re.search(r"rate\(etj_late_records_total", text)
    assert re.search(r"rate\(etj_dead_letters_total", text)
    assert re.search(r"time\(\) - max by \(join, partition\) \(etj_stream_time_ms", text)
    assert re.search(r"etj_table_keys", text)
    # how far behind in records, how fast an answer, how far behind the finality promises are
    assert re.search(r"sum by \(join, topic\) \(etj_input_lag_records", text)
    assert re.search(
        r"histogram_quantile\(0\.99, sum by \(le, join\) \(rate\(etj_answer_latency_seconds_bucket",
        text,
    )
    assert re.search(r"max by \(join, partition\) \(etj_finality_lag_ms", text)


def test_dashboard_is_importable(dashboard):
    """What Grafana needs to import it (UI or the chart's sidecar ConfigMap) on any Prometheus."""
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = []
    for p in dashboard["panels"]:
        ids.append(p["id"])
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:  # every selector is scoped to the chosen jobs
            for metric in parse(t["expr"])[0]:
                assert re.search(rf'\b{metric}\{{[^}}]*job=~"\$job"', t["expr"]), t["expr"]
    assert len(ids) == len(set(ids))
