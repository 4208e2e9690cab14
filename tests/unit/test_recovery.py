"""The recovery loop of app.compat.recovery applies a changelog partition without a hole:
a record after records the consumer dropped waits for their re-read (app.compat.changelog_holes)."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict, deque
from types import SimpleNamespace

from faust.types import TP

from app.compat import recovery as compat_recovery

STANDBY = TP("t-etj-movies-dimension-changelog", 2)
ACTIVE = TP("t-etj-mood-history-changelog", 1)


class Table:
    recovery_buffer_size = standby_buffer_size = 1000

    async def on_changelog_event(self, event):
        return None


class Consumer:
    def __init__(self):
        self.seeks = []
        self._read_offset = {STANDBY: 6}  # the fetch loop handed out 5 and 6 already

    async def seek_wait(self, partitions):
        self.seeks += sorted(partitions.items())

    async def earliest_offsets(self, *tps):
        return dict.fromkeys(tps, 0)


def record(tp, offset):
    return SimpleNamespace(message=SimpleNamespace(tp=tp, offset=offset))


def recovery(in_recovery=False):
    table = Table()
    return SimpleNamespace(
        tables=SimpleNamespace(
            changelog_queue=asyncio.Queue(), standbys_ready=True, on_standbys_ready=lambda: None
        ),
        tp_to_table={STANDBY: table, ACTIVE: table},
        active_tps={ACTIVE} if in_recovery else set(),
        standby_tps={STANDBY},
        active_offsets=Counter({ACTIVE: 5}),
        standby_offsets=Counter({STANDBY: -1}),
        active_highwaters={ACTIVE: 9},
        standby_highwaters={STANDBY: 100},
        _active_events_received_at={},
        _standby_events_received_at={},
        buffers=defaultdict(list),
        buffer_sizes={},
        _processing_times=deque(),
        app=SimpleNamespace(consumer=Consumer(), in_transaction=False),
        in_recovery=in_recovery,
        need_recovery=lambda: True,
        signal_recovery_end=asyncio.Event(),
        should_stop=False,
        _standbys_span=None,
        standby_remaining_total=lambda: 1,
        _last_flush_at=0.0,
        num_samples_required_for_estimate=10,
        _last_active_event_processed_at=None,
        _actives_span=None,
        table=table,
    )


async def run(rec, offsets, settle_s=0.2):
    loop = asyncio.ensure_future(compat_recovery.slurp_changelogs(rec))
    for offset in offsets:
        rec.tables.changelog_queue.put_nowait(record(STANDBY, offset))
    await asyncio.sleep(settle_s)
    loop.cancel()


def applied(rec):
    return [e.message.offset for e in rec.buffers[rec.table]]


def test_a_record_after_a_hole_waits_for_the_re_read():
    rec = recovery()

    async def main():
        # 0..2, then the consumer dropped 3 and 4: 5 and 6 arrive, then the re-read 3..6
        await run(rec, [0, 1, 2, 5, 6, 3, 4, 5, 6])

    asyncio.run(main())
    assert applied(rec) == [0, 1, 2, 3, 4, 5, 6]
    assert rec.standby_offsets[STANDBY] == 6
    assert rec.app.consumer.seeks == [(STANDBY, 3)]  # once, not once per record after the hole


def test_without_the_re_read_the_offset_stays_before_the_hole():
    rec = recovery()
    asyncio.run(run(rec, [0, 1, 2, 5, 6, 7]))
    assert applied(rec) == [0, 1, 2]
    assert rec.standby_offsets[STANDBY] == 2  # what a rebalance seeks from, and persists
    assert rec.app.consumer._read_offset[STANDBY] == 3  # the re-read is not dropped as read


def test_a_recovery_waiting_for_dropped_last_records_reads_them_again(monkeypatch):
    monkeypatch.setattr(compat_recovery, "IDLE_S", 0.05)
    rec = recovery(in_recovery=True)  # ACTIVE applied 5 of 9, nothing more comes
    asyncio.run(run(rec, [], settle_s=0.3))
    assert rec.app.consumer.seeks[0] == (ACTIVE, 6)
