"""How the worker authenticates to Kafka (TLS, SASL), from settings, in one place.

Faust's own clients take :func:`broker_credentials` (``broker_credentials=`` of the app); every
other Kafka client etj opens (the co-partition check, the tools under ``app/commands``, the
batch twin's publisher) takes :func:`aiokafka_auth`, which Faust's own mapping
(``credentials_to_aiokafka_auth``) derives from the same credentials, so the two cannot differ.

Secrets come from files (a mounted Kubernetes Secret) or, when no file is named, from the
environment; a file's trailing newline is not part of the secret. Docs:
docs/operating/security.md.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import faust
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from faust.types.auth import CredentialsT
from pydantic import SecretStr

from app.settings import Settings

__all__ = ["KafkaSecurityError", "aiokafka_auth", "broker_credentials", "check_tls",
           "read_secret", "ssl_context", "tls_enabled"]


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
        raise KafkaSecurityError("mutual TLS needs both ETJ_KAFKA_TLS_CERT_FILE and "
                                 "ETJ_KAFKA_TLS_KEY_FILE")
    try:
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH,
            cafile=str(s.kafka_tls_ca_file) if s.kafka_tls_ca_file else None)
        if s.kafka_tls_cert_file:
            ctx.load_cert_chain(
                str(s.kafka_tls_cert_file), str(s.kafka_tls_key_file),
                password=read_secret(s.kafka_tls_key_password_file, s.kafka_tls_key_password))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaSecurityError(f"cannot load the Kafka TLS files (CA "
                                 f"{s.kafka_tls_ca_file}, cert {s.kafka_tls_cert_file}, key "
                                 f"{s.kafka_tls_key_file}): {exc}") from exc
    return ctx


def broker_credentials(s: Settings) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for these settings (None: plaintext, no SASL)."""
    ctx = ssl_context(s)
    if s.kafka_sasl_mechanism:
        password = read_secret(s.kafka_sasl_password_file, s.kafka_sasl_password)
        if not s.kafka_sasl_username or password is None:
            raise KafkaSecurityError(
                f"SASL {s.kafka_sasl_mechanism} needs ETJ_KAFKA_SASL_USERNAME and a password "
                "(ETJ_KAFKA_SASL_PASSWORD_FILE or ETJ_KAFKA_SASL_PASSWORD)")
        return faust.SASLCredentials(username=s.kafka_sasl_username, password=password,
                                     mechanism=s.kafka_sasl_mechanism, ssl_context=ctx)
    if ctx is not None:
        return faust.SSLCredentials(ctx)
    return None


def aiokafka_auth(s: Settings) -> dict[str, Any]:
    """Keyword arguments of ``AIOKafkaConsumer``/``Producer``/``AdminClient`` for these settings:
    ``security_protocol`` and, as needed, ``ssl_context`` and ``sasl_*`` (Faust's mapping)."""
    return dict(credentials_to_aiokafka_auth(broker_credentials(s)))


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
                asyncio.open_connection(host, int(port), ssl=ctx), timeout_s)
        except ssl.SSLCertVerificationError as exc:
            raise KafkaSecurityError(
                f"etj refuses to start: TLS certificate verification failed for Kafka broker "
                f"{server}: {exc.verify_message or exc} (trusted CAs: "
                f"{s.kafka_tls_ca_file or 'the system store'}; ETJ_KAFKA_TLS_CA_FILE must name "
                f"the CA that signed the broker's certificate)") from exc
        except ssl.SSLError as exc:
            raise KafkaSecurityError(f"etj refuses to start: TLS handshake with Kafka broker "
                                     f"{server} failed: {exc}") from exc
        except (OSError, asyncio.TimeoutError):
            continue  # down or unreachable: the clients' own retries and errors apply
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass
