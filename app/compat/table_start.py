"""The table manager starts without Faust's fixed one-second sleep.

Upstream (faust-streaming 0.15.3, ``faust.tables.manager.TableManager.on_start``): the table
manager sleeps 1.0 s before it registers the tables' changelog channels and starts recovery —
a grace period for tables created while the app starts. Until it is over the conductor waits
("Waiting for tables to be registered...") and the consumer does not subscribe, so every worker
start took a second longer than it had to: a pod restart, each start in the broker tests, and
about 30 worker starts in ``make bench`` (a worker was ready 3.8 s after its process started,
1.0 of them this sleep; the group join takes most of the rest).

etj declares every table at import (:mod:`app.topology`, :mod:`app.range_scan`), before the
worker starts, so there is nothing to wait for. A table created after the channels are
registered is still refused as upstream refuses it ("Too late to add tables at this point"),
not silently left out. ``_original`` is upstream's, kept for the test that shows it sleeps.

Here: upstream's body without the sleep. Test: ``tests/unit/test_table_start.py`` (upstream
sleeps; the patch registers the tables and starts recovery without sleeping, and does neither
when stopping); every broker test starts workers through it. Remove when Faust's table manager
starts without a fixed sleep.
"""

from __future__ import annotations

from faust.tables.manager import TableManager

__all__ = ["install"]

_original = TableManager.on_start


async def on_start(self: TableManager) -> None:
    """Upstream's ``on_start`` without its ``await self.sleep(1.0)``."""
    if not self.should_stop:
        await self._update_channels()
        await self.recovery.start()


def install() -> None:
    TableManager.on_start = on_start  # type: ignore[method-assign]
