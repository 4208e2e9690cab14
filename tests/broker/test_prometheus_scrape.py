"""A real Prometheus (Debian's ``prometheus`` package, installed when absent) scrapes a real
worker, and every metric of the worker that the chart's alert rules read comes back as series
with the labels the rules group by (issue AC, item 1).

The worker runs a join with finality promises; its traffic includes a record that is not JSON
(a dead letter) and one older than the retention (a late record), so each counter the rules
read has a child. Prometheus is asked over its HTTP API, as a dashboard or the rules would ask.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from app.commands.sample_traffic import sample_moods_and_events
from app.dev.local_broker import free_port
from tests.apt import install
from tests.broker.test_finality_broker import spec
from tests.deploy.test_monitoring_chart import alerts, rules_spec
from tests.faults import send, wait_processed
from tests.harness import create_topic, produce
from tests.unit.test_dashboard import exported, parse

START = 1_790_000_000_000
PARTITIONS = 4


@pytest.fixture(scope="module")
def prometheus_bin() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        install(["prometheus"], "--no-install-recommends")
        exe = shutil.which("prometheus")
    assert exe, "the prometheus package did not install prometheus"
    return exe


def rule_metrics() -> dict[str, set[str]]:
    """The worker's metrics the alert rules read (``etj_*``) -> the labels of the metric that
    a rule reading it groups or filters by (a rule's other labels are kube-state-metrics')."""
    own = exported()
    out: dict[str, set[str]] = {}
    for r in alerts(rules_spec()).values():
        names, labels, _ = parse(r["expr"])
        for name in names:
            if name.startswith("etj_"):
                out.setdefault(name, set()).update(labels & own[name])
    return out


def query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_query(port: int, promql: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = query(port, promql)
        except OSError:
            found = []
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


async def test_a_real_prometheus_scrapes_every_series_the_alerts_read(
    names, worker_factory, prometheus_bin, tmp_path
):
    fin = spec(names, "fin", finality=True)
    path = tmp_path / "joins.json"
    path.write_text(json.dumps([fin]))
    topics = {"event": fin["events"]["topic"], "mood": fin["dimension"]["topic"]}
    for topic in topics.values():
        await create_topic(names, topic, PARTITIONS)
    w = worker_factory(names, name="scraped", joins_file=path).wait_ready()

    records = sample_moods_and_events(
        seed=59, count=200, start_ms=START, late_ratio=0.2, consultants=("c0", "c1", "c2")
    )
    await send(names, records, topics=topics)
    # a record that is no JSON (a dead letter), one far behind the retention (late)
    await produce(names, topics["event"], [("c0", b"not json")])
    late = {"consultant": "c1", "recommendation": "old", "event_time": START - 3_600_000, "id": "x"}
    await produce(names, topics["event"], [("c1", late)])
    await asyncio.to_thread(wait_processed, w, len(records) + 2)

    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: etj\n"
        "    metrics_path: /metrics\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{w.web_port}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        up = wait_query(port, 'up{job="etj"} == 1')
        assert up, "Prometheus never scraped the worker: " + Path(log.name).read_text()[-2000:]
        wanted = rule_metrics()
        assert {"etj_input_lag_records", "etj_finality_lag_ms", "etj_ready"} <= set(wanted)
        for name, labels in sorted(wanted.items()):
            series = wait_query(port, name)
            assert series, f"{name}: no series scraped (the rules read it)"
            for s in series:
                missing = labels - set(s["metric"])
                assert not missing, (name, s["metric"], missing)
        # what the new gauges say, as Prometheus has them
        lag = wait_query(port, f'etj_input_lag_records{{join="fin",topic="{topics["event"]}"}}')
        assert {s["metric"]["partition"] for s in lag} == {str(p) for p in range(PARTITIONS)}
        assert all(float(s["value"][1]) >= 0 for s in lag)
        finality = wait_query(port, 'etj_finality_lag_ms{join="fin"}')
        assert finality and all(float(s["value"][1]) >= fin["retention_ms"] for s in finality)
        answered = wait_query(port, 'etj_answer_latency_seconds_count{join="fin"}')
        assert answered and float(answered[0]["value"][1]) >= len(records)
        p99 = wait_query(
            port,
            "histogram_quantile(0.99, sum by (le, join) "
            '(rate(etj_answer_latency_seconds_bucket{join="fin"}[1m])))',
        )
        assert p99, "the latency histogram is not one Prometheus can read quantiles from"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
