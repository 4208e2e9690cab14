"""Pointing ``make run`` and the tests at your own Kafka: the clients get the worker's TLS/SASL
settings (the handshakes themselves: tests/broker/test_own_kafka.py; SASL has no broker here)."""

from __future__ import annotations

from app.dev.local_broker import LocalBroker
from tests.harness import Worker, make_names

SASL = {
    "ETJ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "ETJ_KAFKA_SASL_USERNAME": "etj",
    "ETJ_KAFKA_SASL_PASSWORD": "s3cret",
}


def test_your_kafka_is_reached_with_the_worker_s_sasl_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("ETJ_BOOTSTRAP", "kafka-1:9093,kafka-2:9093")
    for k, v in SASL.items():
        monkeypatch.setenv(k, v)
    broker = LocalBroker(log_dir=tmp_path)  # not started: no network here
    assert broker.external and broker.url == "kafka://kafka-1:9093,kafka://kafka-2:9093"
    assert (
        broker.auth["security_protocol"],
        broker.auth["sasl_mechanism"],
        broker.auth["sasl_plain_username"],
        broker.auth["sasl_plain_password"],
    ) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "etj", "s3cret")

    # the tests' names of that broker carry the settings to workers and clients
    names = make_names(broker.url)
    assert {k: names.env[k] for k in SASL} == SASL
    assert names.client_auth()["sasl_mechanism"] == "SCRAM-SHA-512"


def test_a_broker_the_tests_start_themselves_gets_no_security_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("ETJ_BOOTSTRAP", "kafka-1:9093")
    for k, v in SASL.items():
        monkeypatch.setenv(k, v)
    own = LocalBroker(log_dir=tmp_path, use_existing=False)  # tansu: plaintext
    assert not own.external and own.auth == {}
    names = make_names(own.url)
    assert not any(k.startswith("ETJ_KAFKA_") for k in names.env)
    assert names.client_auth()["security_protocol"] == "PLAINTEXT"
    # and its workers do not inherit the test process's settings of the other broker
    w = Worker(names.env, tmp_path)
    env = w.start_env()
    assert not any(k.startswith("ETJ_KAFKA_") for k in env)
