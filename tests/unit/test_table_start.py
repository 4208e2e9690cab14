"""app.compat.table_manager (EtjTableManager.on_start): the table manager registers its tables and starts recovery at once,
where upstream first sleeps a second."""

from __future__ import annotations

from faust.tables.manager import TableManager

from app.compat.table_manager import EtjTableManager


class Manager:
    """The parts of a TableManager its ``on_start`` touches, recording what it does."""

    def __init__(self) -> None:
        self.should_stop = False
        self.done: list[str] = []
        self.recovery = self

    async def sleep(self, seconds: float) -> None:
        self.done.append(f"sleep {seconds}")

    async def _update_channels(self) -> None:
        self.done.append("register tables")

    async def start(self) -> None:  # self.recovery.start()
        self.done.append("start recovery")


async def test_upstream_sleeps_a_second_before_registering_the_tables():
    m = Manager()
    await TableManager.on_start(m)
    assert m.done == ["sleep 1.0", "register tables", "start recovery"]


async def test_the_patch_registers_the_tables_and_starts_recovery_without_sleeping():
    m = Manager()
    await EtjTableManager.on_start(m)
    assert m.done == ["register tables", "start recovery"]


async def test_a_manager_stopping_before_it_started_does_neither():
    m = Manager()
    m.should_stop = True
    await EtjTableManager.on_start(m)
    assert m.done == []


def test_the_worker_app_uses_etj_table_manager():
    from app.faust_app import app

    assert isinstance(app.tables, EtjTableManager)
    assert type(app.tables.recovery).__name__ == "EtjRecovery"
