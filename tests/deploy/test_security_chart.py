"""The chart's security values (docs/operating/security.md): Secrets mounted read-only whose
paths reach the worker's settings, never their content in the ConfigMap; the NetworkPolicy."""

from __future__ import annotations

import helm_python as helm
import kubernetes_validate
import pytest

from app.settings import Settings
from tests.deploy.test_deploy import (
    CHART,
    KUBE_VERSION,
    config_map_env,
    one,
    render,
    worker_container,
)

SECURED = {
    "kafka": {
        "tls": {
            "secretName": "kafka-client-tls",
            "certKey": "tls.crt",
            "keyKey": "tls.key",
            "keyPasswordKey": "key-password",
        },
        "sasl": {"secretName": "kafka-sasl"},
    },
    "web": {"auth": {"secretName": "etj-views"}},
    "config": {"kafka_sasl_mechanism": "SCRAM-SHA-512", "kafka_sasl_username": "etj"},
    "networkPolicy": {
        "enabled": True,
        "monitoring": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
        },
        "kafka": {"cidrs": ["10.20.0.0/16"], "ports": [9093]},
    },
}


def test_the_secured_chart_lints_strictly_and_is_valid_kubernetes():
    report = helm.lint(CHART, SECURED, strict=True, kube_version="v" + KUBE_VERSION)
    assert not [m for m in report["messages"] if m["severity"] >= 2] and not report["errors"]
    for doc in render(SECURED):
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_secrets_are_read_only_files_whose_paths_become_settings(monkeypatch):
    docs = render(SECURED)
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    container = worker_container(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for name, secret in [
        ("kafka-tls", "kafka-client-tls"),
        ("kafka-sasl", "kafka-sasl"),
        ("views-auth", "etj-views"),
    ]:
        assert volumes[name]["secret"]["secretName"] == secret
        assert volumes[name]["secret"]["defaultMode"] == 0o440
        assert mounts[name]["readOnly"] is True
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for key, value in {**config_map_env(docs), **env}.items():
        if key.startswith("ETJ_"):
            monkeypatch.setenv(key, value)
    s = Settings()
    assert s.kafka_tls and s.kafka_sasl_mechanism == "SCRAM-SHA-512"
    assert str(s.kafka_tls_ca_file) == "/etc/etj/kafka-tls/ca.crt"
    assert str(s.kafka_tls_cert_file) == "/etc/etj/kafka-tls/tls.crt"
    assert str(s.kafka_tls_key_file) == "/etc/etj/kafka-tls/tls.key"
    assert str(s.kafka_tls_key_password_file) == "/etc/etj/kafka-tls/key-password"
    assert str(s.kafka_sasl_password_file) == "/etc/etj/kafka-sasl/password"
    assert str(s.views_token_file) == "/etc/etj/views-auth/token"
    assert not any("PASSWORD" in k or "TOKEN" in k for k in config_map_env(docs))


def test_without_security_values_nothing_is_mounted_and_no_policy_is_made():
    docs = render()
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]
    names = {m["name"] for m in worker_container(docs)["volumeMounts"]}
    assert not names & {"kafka-tls", "kafka-sasl", "views-auth"}
    assert not [e for e in worker_container(docs)["env"] if "KAFKA" in e["name"]]


def test_a_client_certificate_without_its_key_is_refused():
    with pytest.raises(Exception, match="kafka.tls.keyKey"):
        render({"kafka": {"tls": {"secretName": "x", "certKey": "tls.crt"}}})


def test_the_network_policy_lets_in_only_the_release_and_monitoring_on_the_web_port():
    docs = render(SECURED)
    pol = one(docs, "NetworkPolicy")["spec"]
    own = one(docs, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert pol["podSelector"]["matchLabels"] == own
    assert pol["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = pol["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6066}]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": own}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]
    kafka, dns, peers = pol["egress"]
    assert kafka == {
        "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
        "ports": [{"protocol": "TCP", "port": 9093}],
    }
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert peers == {
        "to": [{"podSelector": {"matchLabels": own}}],
        "ports": [{"protocol": "TCP", "port": 6066}],
    }
    # without a monitoring selector, only the release's own pods get in
    bare = one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]
    assert bare["ingress"][0]["from"] == [{"podSelector": {"matchLabels": own}}]
    assert "to" not in bare["egress"][0]  # no CIDRs: any address, on the Kafka ports only
