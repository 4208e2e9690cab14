"""etj's consumer thread (app.compat.consumer_thread): the worker consumer's fetch wait is a
setting, and etj's consumer creates its thread from etj's class."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from app.compat.consumer_thread import EtjConsumerThread


def _thread(wait_ms):
    return SimpleNamespace(
        app=SimpleNamespace(etj=SimpleNamespace(consumer_fetch_max_wait_ms=wait_ms))
    )


@pytest.mark.parametrize("wait_ms, expected", [(100, 100), (None, 1500)])
def test_the_fetch_wait_is_the_setting(wait_ms, expected):
    made = SimpleNamespace(_fetch_max_wait_ms=1500)  # what Faust hard-codes
    with mock.patch.object(
        AIOKafkaConsumerThread, "_create_worker_consumer", return_value=made
    ) as upstream:
        got = EtjConsumerThread._create_worker_consumer(_thread(wait_ms), "transport")
    upstream.assert_called_once()
    assert got is made and got._fetch_max_wait_ms == expected


def test_etj_consumer_creates_etj_thread():
    from app.compat import consumer

    this = SimpleNamespace(loop="loop", beacon="beacon")
    with mock.patch.object(consumer, "EtjConsumerThread") as cls:
        made = consumer.EtjConsumer._new_consumer_thread(this)
    cls.assert_called_once_with(this, loop="loop", beacon="beacon")
    assert made is cls.return_value
