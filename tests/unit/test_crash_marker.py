"""app.state.crash_marker: the table directory's databases survive a clean stop only."""

from __future__ import annotations

from app.state import crash_marker


def _db(tabledir, name):
    (tabledir / name).mkdir(parents=True)
    (tabledir / name / "CURRENT").write_text("x")


def test_a_clean_stop_keeps_the_databases(tmp_path):
    tables = tmp_path / "v1" / "tables"
    assert crash_marker.claim(tables) == 0  # a new volume
    _db(tables, "mood-history-0.db")
    crash_marker.release(tables, clean=True)
    assert not (tables / crash_marker.MARKER).exists()
    assert crash_marker.claim(tables) == 0
    assert (tables / "mood-history-0.db" / "CURRENT").exists()


def test_after_an_unclean_stop_every_database_is_deleted_and_nothing_else(tmp_path, caplog):
    tables = tmp_path / "tables"
    crash_marker.claim(tables)
    for name in ("mood-history-0.db", "recent-joins-3.db", "zone-cars-1.db"):
        _db(tables, name)
    (tables / "active-keys-backups").mkdir()  # not a table partition: left alone
    # killed: release never ran (or ran with batches undelivered)
    crash_marker.release(tables, clean=False)
    assert (tables / crash_marker.MARKER).exists()
    assert crash_marker.claim(tables) == 3
    assert sorted(p.name for p in tables.iterdir()) == ["RUNNING", "active-keys-backups"]
    assert "did not stop cleanly" in caplog.text
