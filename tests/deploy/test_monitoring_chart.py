"""The chart's PodMonitor and PrometheusRule (docs/operating/helm.md#monitoring-and-alerts),
checked with Prometheus's own tool.

- They are made exactly where the cluster has the Prometheus Operator's CRDs (``helm template
  --api-versions``, as ``helm install`` learns them from the cluster), or when forced on; never
  when forced off.
- The PodMonitor scrapes what every worker serves: the pods of the StatefulSet, on its ``web``
  port, at the ``/metrics`` view (kubernetes-validate does not know the CRDs: their structure is
  checked here).
- The PrometheusRule's spec is a Prometheus rule file: ``promtool check rules`` accepts it, and
  ``promtool test rules`` with ``tests/deploy/alerts_test.yaml`` makes each alert fire, and stay
  silent on series that look alike. promtool comes from Debian's ``prometheus`` package,
  installed when absent (:mod:`tests.apt`).
- Each alert reads series that exist (the worker's, or kube-state-metrics'), has a severity, says
  where, and links its section of docs/operating/runbook.md. A real Prometheus scraping a real
  worker reads the worker's ones: tests/broker/test_prometheus_scrape.py.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apt import install
from tests.deploy.test_deploy import (
    NAMESPACE,
    ROOT,
    VARIANTS,
    one,
    render,
    worker_container,
)
from tests.docs.test_site import _anchors
from tests.unit.test_dashboard import FUNCTIONS, KEYWORDS, TARGET_LABELS, exported, parse

CRDS = ("monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/PrometheusRule")
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOK = ROOT / "docs" / "operating" / "runbook.md"
RULE_FILE = "etj-rules.yaml"  # the name alerts_test.yaml gives its rule file
DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")

#: kube-state-metrics' series the alerts read, with their labels, as its documentation gives them
#: (the "Pod Metrics" page of the kubernetes/kube-state-metrics repository; the exit code is
#: EXPERIMENTAL there, added in 2022 by its pull request #1752)
KUBE_STATE_METRICS = {
    "kube_pod_status_ready": {"namespace", "pod", "uid", "condition"},
    "kube_pod_container_status_last_terminated_exitcode": {"namespace", "pod", "container", "uid"},
    "kube_pod_container_status_restarts_total": {"namespace", "pod", "container", "uid"},
}


@pytest.fixture(scope="module")
def promtool() -> str:
    """Prometheus's promtool (Debian's `prometheus` package), installed when absent."""
    exe = shutil.which("promtool")
    if exe is None:
        install(["prometheus"], "--no-install-recommends")
        exe = shutil.which("promtool")
    assert exe, "the prometheus package did not install promtool"
    return exe


@pytest.fixture(scope="module")
def names() -> dict[str, set[str]]:
    """Every series the worker exposes -> its labels (as the dashboard's test reads them)."""
    return exported()


def monitoring(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]


def rules_spec(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The PrometheusRule's spec, rendered where the cluster has the CRDs."""
    spec: dict[str, Any] = one(render(values, api_versions=CRDS), "PrometheusRule")["spec"]
    return spec


def alerts(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in spec["groups"] for r in g["rules"]}


def write_rules(directory: Path, spec: dict[str, Any]) -> Path:
    path = directory / RULE_FILE
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def unit_test(
    promtool: str, directory: Path, spec: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules alerts_test.yaml`` against ``spec``."""
    write_rules(directory, spec)
    shutil.copy(UNIT_TESTS, directory / UNIT_TESTS.name)
    return run(promtool, "test", "rules", UNIT_TESTS.name, cwd=directory)


# ---- made where the CRDs are ----------------------------------------------------------------

ON = {"metrics": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
OFF = {"metrics": {"podMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}}}


@pytest.mark.parametrize(
    ("values", "api_versions", "kinds"),
    [
        (None, (), set()),  # no operator: the chart still installs
        (None, CRDS, {"PodMonitor", "PrometheusRule"}),  # the default where it is
        (None, CRDS[:1], {"PodMonitor"}),
        (None, ("monitoring.coreos.com/v1/ServiceMonitor",), set()),
        (ON, (), {"PodMonitor", "PrometheusRule"}),  # forced on
        (OFF, CRDS, set()),  # forced off
        ({"metrics": {"prometheusRule": {"enabled": False}}}, CRDS, {"PodMonitor"}),
    ],
    ids=[
        "no-crds",
        "crds",
        "podmonitor-crd-only",
        "other-crd",
        "forced-on",
        "forced-off",
        "rule-off",
    ],
)
def test_made_exactly_where_the_crds_are_unless_forced(values, api_versions, kinds):
    docs = render(values, api_versions=api_versions)
    assert {d["kind"] for d in monitoring(docs)} == kinds
    # the rest of the release is the same either way
    others = [d for d in docs if d not in monitoring(docs)]
    assert others == [d for d in render(values) if d not in monitoring(render(values))]


def check_pod_monitor(pm: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    """A PodMonitor (monitoring.coreos.com/v1) that scrapes every worker's /metrics."""
    from app.main import app  # registers the views

    sts = one(docs, "StatefulSet")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["kind"] == "PodMonitor"
    assert set(pm) == {"apiVersion", "kind", "metadata", "spec"}
    assert pm["metadata"]["name"] == sts["metadata"]["name"]
    spec = pm["spec"]
    assert set(spec) == {"selector", "namespaceSelector", "podMetricsEndpoints"}
    assert spec["selector"] == {"matchLabels": sts["spec"]["selector"]["matchLabels"]}
    assert spec["namespaceSelector"] == {"matchNames": [sts["metadata"]["namespace"]]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
    ports = {p["name"] for p in worker_container(docs)["ports"]}
    assert endpoint["port"] in ports
    assert endpoint["path"] in set(app.web.views)
    assert DURATION.fullmatch(endpoint["interval"])
    if "scrapeTimeout" in endpoint:
        assert DURATION.fullmatch(endpoint["scrapeTimeout"])


def check_prometheus_rule(rule: dict[str, Any]) -> None:
    """A PrometheusRule (monitoring.coreos.com/v1): groups of alerting rules, each with a
    severity, a summary, a description and a runbook."""
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) == {"name", "rules"} and group["name"]
        for r in group["rules"]:
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
            assert r["alert"] and r["expr"] and r["labels"]["severity"]
            assert {"summary", "description", "runbook_url"} <= set(r["annotations"])
            assert "for" not in r or DURATION.fullmatch(r["for"])


def test_the_pod_monitor_scrapes_what_every_worker_serves():
    docs = render(api_versions=CRDS)
    pm = one(docs, "PodMonitor")
    check_pod_monitor(pm, docs)
    assert pm["metadata"]["namespace"] == NAMESPACE
    assert pm["spec"]["podMetricsEndpoints"] == [
        {"port": "web", "path": "/metrics", "interval": "30s"}
    ]

    values = {
        "metrics": {
            "podMonitor": {
                "namespace": "monitoring",
                "labels": {"release": "kube-prometheus-stack"},
                "interval": "15s",
                "scrapeTimeout": "10s",
            },
            "prometheusRule": {"namespace": "monitoring", "labels": {"release": "kps"}},
        }
    }
    docs = render(values, api_versions=CRDS)
    pm = one(docs, "PodMonitor")
    check_pod_monitor(pm, docs)
    assert pm["metadata"]["namespace"] == "monitoring"
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}  # still the workers'
    assert pm["spec"]["podMetricsEndpoints"][0]["scrapeTimeout"] == "10s"
    rule = one(docs, "PrometheusRule")
    assert (rule["metadata"]["namespace"], rule["metadata"]["labels"]["release"]) == (
        "monitoring",
        "kps",
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_monitoring_object_of_the_chart_variants_is_well_formed(variant):
    """What test_deploy's kubernetes-validate leaves out (it does not know the CRDs)."""
    for api_versions in ((), CRDS):
        docs = render(VARIANTS[variant], api_versions=api_versions)
        for doc in monitoring(docs):
            if doc["kind"] == "PodMonitor":
                check_pod_monitor(doc, docs)
            else:
                check_prometheus_rule(doc)
    assert monitoring(render(VARIANTS[variant], api_versions=CRDS))


# ---- the rules, with promtool ---------------------------------------------------------------


def test_promtool_version(promtool):
    done = run(promtool, "--version", cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("promtool, version "), done


def test_the_rules_are_a_rule_file_promtool_accepts(promtool, tmp_path):
    spec = rules_spec()
    check_prometheus_rule(one(render(api_versions=CRDS), "PrometheusRule"))
    path = write_rules(tmp_path, spec)
    done = run(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts(spec))} rules found" in done.stdout, done.stdout


def test_each_alert_fires_and_stays_silent_as_the_unit_tests_say(promtool, tmp_path):
    done = unit_test(promtool, tmp_path, rules_spec())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_unit_tests_make_every_alert_fire_and_not_fire():
    defined = set(alerts(rules_spec()))
    assert defined == {
        "EtjWorkerNotReady",
        "EtjInputLagGrowing",
        "EtjDeadLetters",
        "EtjLateRecords",
        "EtjFailStopRestarts",
        "EtjSpecRefused",
        "EtjFinalityStalled",
    }
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    assert tests["rule_files"] == [RULE_FILE]
    fired: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for t in case["alert_rule_test"]:
            (fired if t["exp_alerts"] else silent).add(t["alertname"])
    assert fired == silent == defined
    # and where one fires, it fires for some of the series only: the look-alikes stay silent
    for case in tests["tests"]:
        for t in case["alert_rule_test"]:
            for alert in t["exp_alerts"]:
                same = [
                    s
                    for s in case["input_series"]
                    if all(
                        f'{k}="{v}"' in s["series"]
                        for k, v in alert["exp_labels"].items()
                        if k != "severity"
                    )
                ]
                assert len(same) < len(case["input_series"]), t["alertname"]


def test_promtool_catches_a_broken_rule_and_a_threshold_that_moved(promtool, tmp_path):
    spec = rules_spec()
    broken = copy.deepcopy(spec)
    broken["groups"][0]["rules"][0]["expr"] = "sum by (join) (rate(etj_dead_letters_total[5m]) >"
    path = write_rules(tmp_path, broken)
    assert run(promtool, "check", "rules", str(path), cwd=tmp_path).returncode != 0

    # a threshold above the test's burst of dead letters: the unit test that it fires fails
    higher = rules_spec(
        {"metrics": {"prometheusRule": {"alerts": {"deadLetters": {"perSecond": 2}}}}}
    )
    done = unit_test(promtool, tmp_path, higher)
    assert done.returncode != 0
    assert "alertname: EtjDeadLetters" in done.stdout + done.stderr


def test_thresholds_severities_and_labels_come_from_the_values(promtool, tmp_path):
    values = {
        "metrics": {
            "prometheusRule": {
                "alertLabels": {"team": "streams"},
                "disabled": ["EtjLateRecords"],
                "alerts": {
                    "workerNotReady": {"for": "30m", "severity": "critical"},
                    "inputLagGrowing": {"records": 250000, "window": "30m", "for": "1h"},
                    "deadLetters": {"perSecond": 5},
                    "failStopRestarts": {"window": "1h"},
                    "specRefused": {"window": "2h", "severity": "page"},
                    "finalityStalled": {"beyondRetentionMs": 3600000, "window": "20m"},
                },
            }
        }
    }
    spec = rules_spec(values)
    rules = alerts(spec)
    assert "EtjLateRecords" not in rules and len(rules) == 6
    assert rules["EtjWorkerNotReady"]["for"] == "30m"
    assert rules["EtjWorkerNotReady"]["labels"] == {"severity": "critical", "team": "streams"}
    assert rules["EtjDeadLetters"]["labels"] == {"severity": "warning", "team": "streams"}
    lag = rules["EtjInputLagGrowing"]["expr"]
    assert "> 250000" in lag and "[30m]" in lag and rules["EtjInputLagGrowing"]["for"] == "1h"
    assert "> 5\n" in rules["EtjDeadLetters"]["expr"] + "\n"
    assert "[1h]" in rules["EtjFailStopRestarts"]["expr"]
    assert "[2h]" in rules["EtjSpecRefused"]["expr"] and "== 78" in rules["EtjSpecRefused"]["expr"]
    assert rules["EtjSpecRefused"]["labels"] == {"severity": "page", "team": "streams"}
    finality = rules["EtjFinalityStalled"]["expr"]
    assert "> 3600000" in finality and finality.count("[20m]") == 2
    assert "over 250000" in rules["EtjInputLagGrowing"]["annotations"]["description"]
    path = write_rules(tmp_path, spec)
    assert run(promtool, "check", "rules", str(path), cwd=tmp_path).returncode == 0
    # every alert off: an empty group, which Prometheus takes
    every = {"metrics": {"prometheusRule": {"disabled": sorted(alerts(rules_spec()))}}}
    assert rules_spec(every)["groups"][0]["rules"] == []


def test_each_alert_says_where_and_links_its_runbook_section():
    rules = alerts(rules_spec())
    runbook = RUNBOOK.read_text()
    sections = set(re.findall(r"^## (Etj\w+)$", runbook, re.M))
    assert sections == set(rules), "one runbook section per alert, named as the alert"
    anchors = _anchors(RUNBOOK)
    for name, r in rules.items():
        url = r["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page.endswith("/docs/operating/runbook.md"), url
        assert anchor == name.lower() and anchor in anchors, url
        text = r["annotations"]["summary"] + r["annotations"]["description"]
        where = re.findall(r"\{\{ \$labels\.(\w+) \}\}", text)
        by = set(re.findall(r"by \(([^)]*)\)", r["expr"])[0].replace(" ", "").split(","))
        assert set(where) <= by, (name, where, by)  # it names labels the alert has
        assert {"pod"} <= set(where) or {"join"} <= set(where), name
        if "partition" in by:
            assert "partition" in where, name


def test_the_rules_and_their_unit_tests_read_series_that_exist(names):
    known = {**names, **KUBE_STATE_METRICS}
    for alert, r in alerts(rules_spec()).items():
        metrics, labels, functions = parse(r["expr"])
        assert metrics, alert
        assert metrics <= set(known), (alert, metrics - set(known))
        allowed = set().union(*(known[m] for m in metrics)) | TARGET_LABELS
        assert labels <= allowed, (alert, labels - allowed)
        functions -= KEYWORDS  # `and (`: an operator before a parenthesis, not a call
        assert functions <= FUNCTIONS, (alert, functions - FUNCTIONS)
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    for case in tests["tests"]:
        for s in case["input_series"]:
            name, _, matchers = s["series"].partition("{")
            assert name in known, name
            series_labels = set(re.findall(r"(\w+)=", matchers))
            assert series_labels <= known[name] | TARGET_LABELS, (name, series_labels)
