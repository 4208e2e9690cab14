"""How the worker authenticates to Kafka (TLS, SASL), from settings, in one place.

Every Kafka client etj opens itself (the co-partition check, the tools under ``app/commands``,
the batch twin's publisher and the bootstrap's executors) takes :func:`aiokafka_auth`; Faust's
own clients take ``broker_credentials`` (:func:`app.faust_app.broker_credentials`), made from
that same mapping, so the two cannot differ (``credentials_to_aiokafka_auth``, Faust's mapping
back, gives it again: tests/unit/test_kafka_security.py). No Faust import: the bootstrap's
Spark executors run it, and they have no Faust.

Secrets come from files (a mounted Kubernetes Secret) or, when no file is named, from the
environment; a file's trailing newline is not part of the secret. Docs:
docs/operating/security.md.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from app.settings import Settings

__all__ = [
    "KafkaSecurityError",
    "aiokafka_auth",
    "check_tls",
    "read_secret",
    "ssl_context",
    "tls_enabled",
]


class KafkaSecurityError(RuntimeError):
    """The Kafka security settings are incomplete, or the broker's TLS cannot be trusted."""


def read_secret(file: Path | None, value: SecretStr | None) -> str | None:
    """The secret in ``file`` (its trailing newline stripped), else ``value``, else None."""
    if file is not None:
        try:
            return file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise KafkaSecurityError(f"cannot read the secret file {file}: {exc}") from exc
    return value.get_secret_value() if value is not None else None


def tls_enabled(s: Settings) -> bool:
    return bool(s.kafka_tls or s.kafka_tls_ca_file or s.kafka_tls_cert_file)


def ssl_context(s: Settings) -> ssl.SSLContext | None:
    """The client TLS context (server certificate and host name verified), or None: no TLS."""
    if not tls_enabled(s):
        return None
    if bool(s.kafka_tls_cert_file) != bool(s.kafka_tls_key_file):
        raise KafkaSecurityError(
            "mutual TLS needs both ETJ_KAFKA_TLS_CERT_FILE and ETJ_KAFKA_TLS_KEY_FILE"
        )
    try:
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH,
            cafile=str(s.kafka_tls_ca_file) if s.kafka_tls_ca_file else None,
        )
        if s.kafka_tls_cert_file:
            ctx.load_cert_chain(
                str(s.kafka_tls_cert_file),
                str(s.kafka_tls_key_file),
                password=read_secret(s.kafka_tls_key_password_file, s.kafka_tls_key_password),
            )
    except (OSError, ssl.SSLError) as exc:
        raise KafkaSecurityError(
            f"cannot load the Kafka TLS files (CA "
            f"{s.kafka_tls_ca_file}, cert {s.kafka_tls_cert_file}, key "
            f"{s.kafka_tls_key_file}): {exc}"
        ) from exc
    return ctx


def aiokafka_auth(s: Settings) -> dict[str, Any]:
    """Keyword arguments of ``AIOKafkaConsumer``/``Producer``/``AdminClient`` for these settings:
    ``security_protocol`` and, as needed, ``ssl_context`` and ``sasl_*`` (what Faust's
    ``credentials_to_aiokafka_auth`` gives for the app's ``broker_credentials``)."""
    ctx = ssl_context(s)
    if s.kafka_sasl_mechanism:
        password = read_secret(s.kafka_sasl_password_file, s.kafka_sasl_password)
        if not s.kafka_sasl_username or password is None:
            raise KafkaSecurityError(
                f"SASL {s.kafka_sasl_mechanism} needs ETJ_KAFKA_SASL_USERNAME and a password "
                "(ETJ_KAFKA_SASL_PASSWORD_FILE or ETJ_KAFKA_SASL_PASSWORD)"
            )
        return {
            "security_protocol": "SASL_SSL" if ctx is not None else "SASL_PLAINTEXT",
            "sasl_mechanism": s.kafka_sasl_mechanism,
            "sasl_plain_username": s.kafka_sasl_username,
            "sasl_plain_password": password,
            "ssl_context": ctx,
        }
    if ctx is not None:
        return {"security_protocol": "SSL", "ssl_context": ctx}
    return {"security_protocol": "PLAINTEXT"}


async def check_tls(s: Settings, bootstrap: str, timeout_s: float = 10.0) -> None:
    """Shake hands with each bootstrap server once, and say plainly why TLS fails.

    aiokafka reports a refused certificate only as "Unable to bootstrap from ..." and Faust
    retries; this names the server, the CA file and the verification error instead, so a
    worker with the wrong CA stops at once with a message (issue N).
    """
    ctx = ssl_context(s)
    if ctx is None:
        return
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), ssl=ctx), timeout_s
            )
        except ssl.SSLCertVerificationError as exc:
            raise KafkaSecurityError(
                f"etj refuses to start: TLS certificate verification failed for Kafka broker "
                f"{server}: {exc.verify_message or exc} (trusted CAs: "
                f"{s.kafka_tls_ca_file or 'the system store'}; ETJ_KAFKA_TLS_CA_FILE must name "
                f"the CA that signed the broker's certificate)"
            ) from exc
        except ssl.SSLError as exc:
            raise KafkaSecurityError(
                f"etj refuses to start: TLS handshake with Kafka broker {server} failed: {exc}"
            ) from exc
        except (TimeoutError, OSError):
            continue  # down or unreachable: the clients' own retries and errors apply
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass
