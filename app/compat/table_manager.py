"""Faust's table manager (``faust.tables.manager.TableManager``): etj's subclass.

The table manager registers the tables' changelog channels, owns the recovery service, and on a
rebalance has every table open its newly assigned partitions before recovery replays them.
etj changes two of its methods and gives it etj's recovery (:mod:`app.compat.recovery`).
:class:`EtjTableManager` is the app's ``TableManager`` setting (``app.faust_app.create_app``),
Faust's extension point for it, so upstream's class is left as it is.
"""

from __future__ import annotations

import logging
from typing import cast

from faust.tables.manager import TableManager
from faust.types import TP

from app.compat.recovery import EtjRecovery
from app.compat.upstream import replaces

__all__ = ["EtjTableManager"]

log = logging.getLogger(__name__)


class EtjTableManager(TableManager):
    """Faust's table manager with etj's recovery and two changes (module doc)."""

    @property
    @replaces("faust.tables.manager:TableManager.recovery", "9e5e10447444")
    def recovery(self) -> EtjRecovery:
        """The table manager's recovery is etj's (:class:`~app.compat.recovery.EtjRecovery`).

        Upstream: the ``recovery`` property creates Faust's ``Recovery`` on first use; no
        setting names its class.

        Symptom: without it none of etj's recovery changes run: recovery one record per loop
        turn, a standby's missing offset crashing it, inputs resumed before they are seeked.

        Test: tests/unit/test_table_start.py::test_the_worker_app_uses_etj_table_manager

        Remove when: :mod:`app.compat.recovery` is empty, or Faust takes a recovery class
        setting.
        """
        if self._recovery is None:
            self._recovery = EtjRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        # only this property sets it (Faust's annotation: its own Recovery class)
        return cast(EtjRecovery, self._recovery)

    @replaces("faust.tables.manager:TableManager.on_start", "b82e759be50c")
    async def on_start(self) -> None:
        """The table manager starts without Faust's fixed one-second sleep.

        Upstream: ``on_start`` sleeps 1.0 s before it registers the tables' changelog channels
        and starts recovery, a grace period for tables created while the app starts; until then
        the consumer does not subscribe.

        Symptom: every worker start took a second longer than it had to (a pod restart, each
        start in the broker tests, about 30 in ``make bench``: a worker was ready 3.8 s after
        its process started, 1.0 of them this sleep). etj declares every table at import
        (:mod:`app.topology`), so there is nothing to wait for; a table created later is still
        refused as upstream refuses it ("Too late to add tables at this point").

        Here: upstream's body without the sleep.

        Test: tests/unit/test_table_start.py::test_the_patch_registers_the_tables_and_starts_recovery_without_sleeping

        Remove when: Faust's table manager starts without a fixed sleep.
        """
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()

    @replaces("faust.tables.manager:TableManager.on_rebalance", "fc9b70e03994")
    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        """Snapshots are installed before the stores open their newly assigned partitions.

        Upstream: ``on_rebalance`` has every table's store open its newly assigned active
        partitions, then recovery reads each one's persisted offset and replays the changelog
        from there; a worker with an empty disk replays every changelog from offset 0.

        Symptom: hours of replay for hundreds of millions of keys before a fresh worker is
        ready (docs/operating/snapshots.md).

        Here, with ``ETJ_SNAPSHOT_URL``, the snapshot service (:mod:`app.state.snapshot_service`)
        first installs the newest usable snapshot of each active partition this worker has
        no local state for; Faust then replays only the tail. A failure is never fatal:
        Faust replays the whole changelog instead.

        Test: tests/broker/test_snapshots.py::test_kill_9_then_an_empty_disk_starts_from_the_snapshot_and_equals_a_full_replay

        Remove when: Faust's RocksDB store can back up to and restore from object storage.
        """
        # set by app.state.snapshot_service.install (which imports compat: not imported here)
        service = getattr(self.app, "table_snapshots", None)
        if service is not None:
            try:
                await service.restore(assigned)
            except Exception as exc:  # never fatal: Faust replays the changelog instead
                log.warning("snapshot restore failed (%r): full replay", exc)
        await TableManager.on_rebalance(self, assigned, revoked, newly_assigned, generation_id)
