"""A Kafka broker behind TLS for tests: a throwaway CA, a TLS-terminating proxy, a tansu.

The bundled tansu speaks plaintext only, so a proxy on 127.0.0.1 terminates TLS (and requires
a client certificate: mutual TLS) and forwards the bytes to a tansu of its own, started with
the proxy's address as its advertised listener: the broker's metadata sends clients back
through the proxy, never around it. The proxy runs on its own thread and event loop, so the
tests' blocking waits (``Worker.wait_ready``) do not stall it.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.dev.local_broker import free_port, tansu_binary


@dataclass(frozen=True)
class Certs:
    """PEM files: the CA, the server's and a client's certificate, and an unrelated CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path  # encrypted with ``client_key_password``
    client_key_password: str
    other_ca: Path  # trusts nothing the proxy presents


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    cn: str,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_certs(directory: Path, key_password: str = "key-secret") -> Certs:
    """A fresh CA, a server certificate for 127.0.0.1/localhost, an encrypted client key."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("etj test CA")
    other, _ = _ca("some other CA")
    server, server_key = _leaf("127.0.0.1", ca, ca_key, server=True)
    client, client_key = _leaf("etj-worker", ca, ca_key, server=False)

    def pem(cert: x509.Certificate, name: str) -> Path:
        (directory / name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return directory / name

    def key_pem(key: ec.EllipticCurvePrivateKey, name: str, password: str | None) -> Path:
        enc = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        (directory / name).write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
        )
        return directory / name

    return Certs(
        ca=pem(ca, "ca.pem"),
        server_cert=pem(server, "server.pem"),
        server_key=key_pem(server_key, "server.key", None),
        client_cert=pem(client, "client.pem"),
        client_key=key_pem(client_key, "client.key", key_password),
        client_key_password=key_password,
        other_ca=pem(other, "other-ca.pem"),
    )


class TlsProxy:
    """Accept TLS on 127.0.0.1:``port`` (client certificate required), forward to ``target``."""

    def __init__(self, certs: Certs, target_port: int, port: int | None = None) -> None:
        self.port = port or free_port()
        self.target_port = target_port
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca))
        self.context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.handshake_failures: list[str] = []
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="tls-proxy"
        )
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> TlsProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, ssl=self.context, ssl_handshake_timeout=10
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                try:
                    dst.close()
                except (OSError, RuntimeError):
                    pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


class TlsBroker:
    """A tansu that advertises the TLS proxy's address, and the proxy in front of it."""

    def __init__(self, certs: Certs, log_dir: Path) -> None:
        self.certs = certs
        self.tansu_port = free_port()
        self.proxy = TlsProxy(certs, self.tansu_port)
        self.log_path = log_dir / "tansu-tls.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.proxy.port}"

    def start(self) -> TlsBroker:
        self.proxy.start()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    f"tcp://127.0.0.1:{self.tansu_port}",
                    "--advertised-listener-url",
                    f"tcp://127.0.0.1:{self.proxy.port}",
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # plaintext clients would be sent to the proxy by the metadata: wait for the port only
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.tansu_port), timeout=1).close()
                return self
            except OSError as err:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(
                        "tansu behind the TLS proxy did not start: "
                        + self.log_path.read_text(errors="replace")
                    ) from err
                time.sleep(0.1)

    def stop(self) -> None:
        self.proxy.stop()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
