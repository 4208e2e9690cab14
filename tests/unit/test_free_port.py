"""The ports the tests and ``make run`` give their servers (app.dev.local_broker.free_port)."""

from __future__ import annotations

import socket

import pytest

from app.dev import local_broker

pytestmark = pytest.mark.unit


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() -> None:
    """An outgoing connection cannot take a port below the range as its source port."""
    low = local_broker._ephemeral_low()
    ports = [local_broker.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    if low > local_broker._STRIPES_FROM + local_broker._STRIPE_WIDTH:
        assert all(local_broker._STRIPES_FROM <= p < low for p in ports), ports


def test_a_port_someone_listens_on_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(local_broker, "_STRIPES_FROM", port)
        monkeypatch.setattr(local_broker, "_STRIPE_WIDTH", 2)
        monkeypatch.setattr(local_broker, "_ephemeral_low", lambda: port + 4)
        monkeypatch.setattr(local_broker, "_handed_out", set())
        got = local_broker.free_port()  # the stripe is {port, port + 1}
        assert got != port
