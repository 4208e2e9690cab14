"""Range scans on both table stores return exactly one zone's cars, never a neighbour's.

The stores are Faust's own (memory with the sorted index, and RocksDB through rocksdict), filled
the two ways a worker fills them: live writes while handling an event, and changelog recovery.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.exceptions import ImproperlyConfigured
from faust.stores.rocksdb import Store as RocksDBStore
from faust.streams import _current_event
from faust.types import TP, Message

from app.state.ordered_keys import (
    INT64_MAX,
    INT64_MIN,
    decode_zone_car,
    encode_zone_car,
    zone_prefix,
)
from app.state.range_scan import RangeTable, SortedMemoryStore, range_table, scan, scan_prefix

PARTITION = 1
ZONE = 1_000
# the zone under test, its numeric neighbours, and far-away / extreme ids, with edge car ids
CARS = {
    ZONE: [0, 1, 7, 255, 256, 2**32, INT64_MAX],
    ZONE - 1: [0, 3, INT64_MAX],  # INT64_MAX: the greatest key just below ZONE's range
    ZONE + 1: [INT64_MIN, 0, 1],  # INT64_MIN: the smallest key just above it
    0: [1, 2],
    2**40: [5],
    INT64_MAX: [0, INT64_MAX],
    INT64_MIN: [0],
}


@dataclass
class FakeMessage:
    key: bytes
    value: bytes | None
    partition: int
    offset: int
    topic: str = "changelog"

    @property
    def tp(self) -> TP:
        return TP(self.topic, self.partition)


@dataclass
class FakeEvent:
    """What a store reads of an event: the message, and for the memory store key/value."""

    message: FakeMessage
    key: Any = None
    value: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def value_of(zone: int, car: int) -> list[int]:
    return [zone, car]  # scanned values must decode to what was written


def make_table(store: str, datadir: Path) -> faust.Table:
    app = faust.App(
        f"range-{store}", broker="kafka://127.0.0.1:1", store=f"{store}://", datadir=str(datadir)
    )
    return range_table(app, "zone-cars", default=None, partitions=4)


@pytest.fixture(params=["memory", "rocksdb"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> faust.Table:
    """The same scenario on each store."""
    return make_table(request.param, tmp_path)


@pytest.fixture
def memory_table(tmp_path: Path) -> faust.Table:
    return make_table("memory", tmp_path)


@pytest.fixture
def rocksdb_table(tmp_path: Path) -> faust.Table:
    return make_table("rocksdb", tmp_path)


@contextmanager
def event_of(partition: int) -> Iterator[None]:
    """Writes happen inside an event of a partition (RocksDB writes to that partition's db)."""
    event = FakeEvent(FakeMessage(b"", b"", partition, 0))
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def with_event(write: Any) -> None:
    with event_of(PARTITION):
        write()


@pytest.fixture
def in_event() -> Iterator[None]:
    with event_of(PARTITION):
        yield


def write_live(table: faust.Table) -> None:
    for zone, cars in CARS.items():
        for car in cars:
            table.data[encode_zone_car(zone, car)] = value_of(zone, car)


async def recover(table: faust.Table, records: list[tuple[bytes, Any]]) -> None:
    """Apply changelog records (value None = tombstone) as Faust's recovery does: serialized
    as the table logs them, decoded by its changelog topic, applied to the store in a batch."""
    serializers = table.app.serializers
    events = []
    for offset, (key, value) in enumerate(records):
        raw_key = serializers.dumps_key(table.key_type, key, serializer=table.key_serializer)
        raw_value = (
            None
            if value is None
            else serializers.dumps_value(table.value_type, value, serializer=table.value_serializer)
        )
        message = Message(
            topic=table.changelog_topic.get_topic_name(),
            partition=PARTITION,
            offset=offset,
            timestamp=0.0,
            timestamp_type=0,
            headers=None,
            key=raw_key,
            value=raw_value,
            checksum=b"",
            serialized_key_size=len(raw_key),
            serialized_value_size=0,
        )
        events.append(await table.changelog_topic.decode(message, propagate=True))
    table.apply_changelog_batch(events)


def zone_scan(table: faust.Table, zone: int) -> list[tuple[tuple[int, int], Any]]:
    return [(decode_zone_car(k), v) for k, v in scan_prefix(table, zone_prefix(zone), PARTITION)]


def expected(zone: int) -> list[tuple[tuple[int, int], Any]]:
    return [((zone, car), value_of(zone, car)) for car in sorted(CARS[zone])]


def test_each_store_gets_its_range_capable_class(memory_table, rocksdb_table):
    assert isinstance(memory_table, RangeTable) and isinstance(rocksdb_table, RangeTable)
    assert isinstance(memory_table.data, SortedMemoryStore)
    assert isinstance(rocksdb_table.data, RocksDBStore)


def test_live_writes_scan_exactly_one_zone(table, in_event):
    write_live(table)
    for zone in CARS:
        assert zone_scan(table, zone) == expected(zone), zone
    assert zone_scan(table, ZONE + 2) == [] and zone_scan(table, -5) == []


def test_scan_of_a_key_range_is_half_open(table, in_event):
    write_live(table)
    lo, hi = encode_zone_car(ZONE, 7), encode_zone_car(ZONE, 2**32)
    assert [decode_zone_car(k) for k, _ in scan(table, lo, hi, PARTITION)] == [
        (ZONE, 7),
        (ZONE, 255),
        (ZONE, 256),
    ]


def test_deletes_leave_the_range(table, in_event):
    write_live(table)
    del table.data[encode_zone_car(ZONE, 7)]
    del table.data[encode_zone_car(ZONE, INT64_MAX)]
    assert [k[1] for k, _ in zone_scan(table, ZONE)] == [0, 1, 255, 256, 2**32]


async def test_recovery_from_the_changelog_rebuilds_the_ordered_index(table):
    records: list[tuple[bytes, Any]] = [
        (encode_zone_car(zone, car), value_of(zone, car))
        for zone, cars in CARS.items()
        for car in reversed(cars)
    ]
    records += [
        (encode_zone_car(ZONE, 7), None),  # tombstone: the car left
        (encode_zone_car(ZONE + 1, 0), None),
        (encode_zone_car(ZONE, 9), value_of(ZONE, 9)),
    ]  # a car arrived later
    await recover(table, records)
    assert [k[1] for k, _ in zone_scan(table, ZONE)] == [0, 1, 9, 255, 256, 2**32, INT64_MAX]
    assert [k[1] for k, _ in zone_scan(table, ZONE + 1)] == [INT64_MIN, 1]
    assert zone_scan(table, ZONE - 1) == expected(ZONE - 1)


async def test_rocksdb_offset_bookkeeping_row_is_never_a_car(rocksdb_table):
    """Faust stores b"__faust\\0offset__" (16 bytes, like our keys) in every partition db."""
    table = rocksdb_table
    await recover(table, [(encode_zone_car(ZONE, 1), value_of(ZONE, 1))])
    offset_key = table.data.offset_key
    assert len(offset_key) == 16
    zone, car = decode_zone_car(offset_key)
    assert table.data._db_for_partition(PARTITION).get(offset_key) is not None
    assert zone_scan(table, zone) == []
    # and a real car sharing the offset row's zone is found, the row still skipped
    with_event(lambda: table.data.__setitem__(encode_zone_car(zone, car + 1), [1, 2]))
    assert zone_scan(table, zone) == [((zone, car + 1), [1, 2])]


def test_memory_scan_never_walks_the_whole_table(memory_table, in_event):
    table = memory_table
    write_live(table)

    class NoFullScan(type(table.data.data)):  # type: ignore[misc]
        def __iter__(self):
            raise AssertionError("full-table iteration")

        keys = values = items = __iter__

    table.data.data = NoFullScan(table.data.data)
    assert zone_scan(table, ZONE) == expected(ZONE)


def test_a_table_without_the_range_store_is_refused(tmp_path):
    app = faust.App("plain", broker="kafka://127.0.0.1:1", store="memory://", datadir=str(tmp_path))
    plain = app.Table("plain", default=None)
    with pytest.raises(TypeError, match="cannot scan"):
        list(scan(plain, b"", None, 0))


def test_range_tables_log_their_keys_raw_and_refuse_another_key_type(memory_table, tmp_path):
    assert memory_table.key_serializer == "raw"
    assert memory_table.changelog_topic.key_serializer == "raw"
    app = faust.App("other", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))
    with pytest.raises(ImproperlyConfigured, match="bytes keys"):
        range_table(app, "json-keys", key_type=str)
    # a raw schema alone is not enough (Faust takes the key serializer from key_type)
    with_schema = range_table(app, "schema", schema=faust.Schema(key_serializer="raw"))
    assert with_schema.changelog_topic.key_serializer == "raw"
