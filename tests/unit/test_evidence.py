"""A failed end-to-end test keeps its logs (tests/conftest.py ``keep_evidence``): every log of
its temporary folder but the workers' state, a chaos run's topic dump, and the tail of the
session broker's log."""

from __future__ import annotations

from types import SimpleNamespace

from tests import conftest


def test_the_logs_are_kept_and_the_state_is_not(tmp_path, monkeypatch):
    test_tmp = tmp_path / "test"
    (test_tmp / "w-data" / "rocksdb").mkdir(parents=True)
    (test_tmp / "w.log").write_text("worker said why\n")
    (test_tmp / "c" / "etj-0.log").parent.mkdir()
    (test_tmp / "c" / "etj-0.log").write_text("container\n")
    (test_tmp / "w-data" / "rocksdb" / "000003.log").write_bytes(b"\0" * 10)  # a RocksDB WAL
    (test_tmp / "w-data" / "state.sst").write_bytes(b"\0" * 10)
    (test_tmp / "topics").mkdir()  # what a chaos run that was not exact dumped
    (test_tmp / "topics" / "etj-output.jsonl").write_text('{"p": 0, "o": 7}\n')
    broker_log = tmp_path / "broker" / "tansu.log"
    broker_log.parent.mkdir()
    broker_log.write_text("x" * 30_000_000 + "the end\n")
    monkeypatch.setattr(conftest, "EVIDENCE", tmp_path / "evidence")
    monkeypatch.setattr(conftest, "SESSION_LOGS", [broker_log])
    item = SimpleNamespace(
        nodeid="tests/broker/test_x.py::test_y[a b]", funcargs={"tmp_path": test_tmp}
    )

    conftest.keep_evidence(item)  # type: ignore[arg-type]

    out = conftest.evidence_dir(item)  # type: ignore[arg-type]
    assert out == tmp_path / "evidence" / "tests_broker_test_x.py_test_y_a_b_"
    kept = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert kept == ["c/etj-0.log", "session-tansu.log", "topics/etj-output.jsonl", "w.log"]
    assert (out / "w.log").read_text() == "worker said why\n"
    tail = (out / "session-tansu.log").read_bytes()
    assert tail.endswith(b"the end\n") and len(tail) == 20_000_000
