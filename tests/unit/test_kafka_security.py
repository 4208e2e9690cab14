"""app.kafka.security: settings -> Faust's broker_credentials and aiokafka's keyword arguments.

TLS is also tested for real (tests/broker/test_tls.py). SASL is tested here only: the bundled
tansu broker cannot both require SASL and have a user created on it (docs/operating/security.md).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from app.faust_app import broker_credentials, create_app
from app.kafka.security import KafkaSecurityError, aiokafka_auth, read_secret
from app.settings import Settings
from tests.tls_proxy import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def settings(**kw) -> Settings:
    return Settings(_env_file=None, **kw)


def test_no_security_settings_is_plaintext():
    assert broker_credentials(settings()) is None
    assert aiokafka_auth(settings()) == {"security_protocol": "PLAINTEXT"}


def test_tls_with_a_ca_verifies_the_broker_and_its_host_name(certs):
    s = settings(kafka_tls_ca_file=certs.ca)
    creds = broker_credentials(s)
    assert isinstance(creds, faust.SSLCredentials)
    auth = aiokafka_auth(s)
    assert auth["security_protocol"] == "SSL"
    ctx = auth["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert any("etj test CA" in str(c.get("subject")) for c in ctx.get_ca_certs())


def test_tls_alone_trusts_the_system_store():
    auth = aiokafka_auth(settings(kafka_tls=True))
    assert (
        auth["security_protocol"] == "SSL" and auth["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    )


def test_a_client_certificate_with_an_encrypted_key_and_its_password_file(certs, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text(certs.client_key_password + "\n")
    s = settings(
        kafka_tls_ca_file=certs.ca,
        kafka_tls_cert_file=certs.client_cert,
        kafka_tls_key_file=certs.client_key,
        kafka_tls_key_password_file=pw,
    )
    assert aiokafka_auth(s)["security_protocol"] == "SSL"
    pw.write_text("wrong")
    with pytest.raises(KafkaSecurityError, match="cannot load the Kafka TLS files"):
        broker_credentials(s)
    with pytest.raises(KafkaSecurityError, match="needs both"):
        broker_credentials(settings(kafka_tls_cert_file=certs.client_cert))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_without_tls_is_sasl_plaintext(mechanism, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    s = settings(
        kafka_sasl_mechanism=mechanism, kafka_sasl_username="etj", kafka_sasl_password_file=pw
    )
    creds = broker_credentials(s)
    assert isinstance(creds, faust.SASLCredentials) and creds.password == "s3cret"
    assert aiokafka_auth(s) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "etj",
        "sasl_plain_password": "s3cret",
        "ssl_context": None,
    }


def test_sasl_over_tls_is_sasl_ssl_with_the_password_from_the_environment(certs, monkeypatch):
    monkeypatch.setenv("ETJ_KAFKA_SASL_PASSWORD", "from-env")
    s = settings(
        kafka_tls_ca_file=certs.ca, kafka_sasl_mechanism="SCRAM-SHA-512", kafka_sasl_username="etj"
    )
    auth = aiokafka_auth(s)
    assert auth["security_protocol"] == "SASL_SSL" and auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert auth["sasl_plain_password"] == "from-env"
    assert isinstance(auth["ssl_context"], ssl.SSLContext)
    assert "from-env" not in repr(s)  # a secret setting never shows in logs


def test_a_secret_file_wins_over_the_environment_and_a_missing_one_is_named(tmp_path):
    from pydantic import SecretStr

    f = tmp_path / "token"
    f.write_text("from-file\r\n")
    assert read_secret(f, SecretStr("from-env")) == "from-file"
    assert read_secret(None, SecretStr("from-env")) == "from-env"
    assert read_secret(None, None) is None
    with pytest.raises(KafkaSecurityError, match=str(tmp_path / "nope")):
        read_secret(tmp_path / "nope", None)


def test_sasl_without_a_user_or_password_is_refused():
    with pytest.raises(KafkaSecurityError, match="needs ETJ_KAFKA_SASL_USERNAME"):
        broker_credentials(settings(kafka_sasl_mechanism="PLAIN", kafka_sasl_username="etj"))
    with pytest.raises(ValueError):
        settings(kafka_sasl_mechanism="GSSAPI")  # not offered


def test_the_faust_app_and_the_other_clients_get_the_same_credentials(tmp_path, certs):
    pw = tmp_path / "pw"
    pw.write_text("s3cret")
    s = settings(
        kafka_tls_ca_file=certs.ca,
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="etj",
        kafka_sasl_password_file=pw,
        datadir=Path(tmp_path / "data"),
    )
    app = create_app(s)
    faust_side = credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context)
    ours = aiokafka_auth(s)
    assert {k: v for k, v in faust_side.items() if k != "ssl_context"} == {
        k: v for k, v in ours.items() if k != "ssl_context"
    }
    assert faust_side["security_protocol"] == "SASL_SSL"
    assert isinstance(faust_side["ssl_context"], ssl.SSLContext)
