"""app.compat.recovery (EtjRecovery._seek_offsets): Faust's recovery seeks a partition with no offset yet (None) to
its start instead of handing aiokafka an offset it refuses."""

from __future__ import annotations

from collections import Counter

from faust.types import TP

from app.compat.recovery import EtjRecovery


class Consumer:
    def __init__(self) -> None:
        self.sought: dict[TP, int] = {}

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        for _tp, offset in offsets.items():  # as aiokafka's seek checks
            if not isinstance(offset, int) or offset < 0:
                raise ValueError("Offset must be a positive integer")
        self.sought.update(offsets)


async def test_a_partition_added_with_no_offset_is_read_from_its_start():

    fresh, kept, older = TP("t-changelog", 0), TP("t-changelog", 1), TP("t-changelog", 2)
    offsets: Counter = Counter()
    offsets[fresh] = None  # Recovery._add for a store with no persisted offset
    offsets[kept] = 41
    offsets[older] = -1
    consumer = Consumer()
    await EtjRecovery._seek_offsets(
        object.__new__(EtjRecovery), consumer, {fresh, kept, older}, offsets, "standby"
    )
    assert consumer.sought == {fresh: 0, kept: 41, older: 0}
    assert offsets[fresh] == -1  # Faust's own "nothing applied"
