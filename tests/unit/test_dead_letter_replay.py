"""Dead letters replayed (app.commands.replay, app.loop.dead_letters): a dead letter keeps the
original's timestamp and headers and reads back as the record it stands for; a replay sends only
those whose cause is gone, judged by the worker's rules, to the partition Kafka's partitioner
gives their key, each once; the others are counted by rule or reason."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

from app.commands.dead_letters import Summary
from app.commands.replay import Judge, Original, Verdict, inputs_of
from app.joins.resolve import resolve
from app.kafka.copartition import wrong_partition_reason
from app.kafka.partitioner import partition_for
from app.loop.dead_letters import (
    MAX_KEPT_BYTES,
    dead_letter,
    dead_letter_value,
    handling,
    read_dead_letter,
)
from tests.unit.test_spec_fingerprint import TIERS

NOW = 1_790_000_000_000
VIEWS = "etj-page-views"
HEADERS = [("trace", b"t-1"), ("raw", b"\xff\x00"), ("none", None)]


def view(user: str = "u1", t: int = NOW - 60_000, **more: Any) -> bytes:
    return json.dumps({"id": "v1", "user_id": user, "page": "/", "event_time": t, **more}).encode()


def letter(
    value: bytes | None,
    error: str,
    key: bytes | None = b"u1",
    partition: int = 0,
    offset: int = 7,
    topic: str = VIEWS,
    timestamp: int | None = NOW - 60_000,
    headers: Any = HEADERS,
) -> Any:
    return read_dead_letter(
        dead_letter_value(topic, partition, offset, key, value, error, timestamp, headers)
    )


def judge(spec: dict[str, Any] = TIERS, **settings: Any) -> Judge:
    return Judge(
        inputs_of([resolve(spec)]),
        {VIEWS: 4, "etj-user-tiers": 4},
        NOW,
        settings.pop("max_future_ms", 60_000),
        **settings,
    )


def wrong(key: bytes = b"u1") -> tuple[int, str]:
    """A partition that is not murmur2's for ``key``, and the worker's dead letter reason."""
    right = partition_for(key, 4)
    p = (right + 1) % 4
    return p, wrong_partition_reason(key, p, right, 4)


def test_a_dead_letter_keeps_the_originals_timestamp_and_headers_and_reads_back_as_it():
    d = letter(view(), "bad", key=b"u1", timestamp=123)
    assert (d.topic, d.partition, d.offset, d.key, d.value) == (VIEWS, 0, 7, b"u1", view())
    assert (d.timestamp, d.headers, d.error, d.exact) == (123, HEADERS, "bad", True)
    raw = json.loads(dead_letter_value(VIEWS, 0, 7, b"u1", b"{}", "bad", 123, HEADERS))
    assert raw["timestamp"] == 123
    assert raw["headers"] == [
        {"key": "trace", "value": "t-1", "value_encoding": "text"},
        {"key": "raw", "value": "/wA=", "value_encoding": "base64"},
        {"key": "none", "value": None, "value_encoding": "null"},
    ]


def test_a_key_that_is_not_utf8_is_kept_exact_in_base64():
    # a Long key's 8 bytes, an Avro key's framing: replayed as they were
    for key in (b"\x00\x00\x00\x00\x00\x00\x01\xf4", b"\x00\x00\x00\x00\x01\x02\xff"):
        d = letter(view(), "bad", key=key)
        assert (d.key, d.exact) == (key, True)
    raw = json.loads(dead_letter_value(VIEWS, 0, 7, b"\xffk", b"{}", "bad", 1, HEADERS))
    assert (raw["key"], raw["key_encoding"]) == ("/2s=", "base64")
    raw = json.loads(dead_letter_value(VIEWS, 0, 7, None, b"{}", "bad", 1, HEADERS))
    assert (raw["key"], raw["key_encoding"]) == (None, "null")


def test_a_dead_letter_that_cannot_stand_for_its_original_says_why():
    big = b"x" * (MAX_KEPT_BYTES + 1)
    assert "cut at 64 KiB" in letter(big, "bad").inexact
    assert "no timestamp" in letter(view(), "bad", timestamp=None).inexact
    assert "headers are unknown" in letter(view(), "bad", headers=None).inexact
    # a dead letter written before keys had an encoding: replacement characters
    old = json.loads(dead_letter_value(VIEWS, 0, 7, None, view(), "bad", 1, HEADERS))
    old["key"] = b"\xffk".decode("utf-8", errors="replace")
    del old["key_encoding"]
    assert "not UTF-8" in read_dead_letter(json.dumps(old).encode()).inexact
    assert "key was cut" in letter(view(), "bad", key=b"k" * (MAX_KEPT_BYTES + 1)).inexact
    huge = [("h", b"y" * (MAX_KEPT_BYTES + 1))]
    raw = json.loads(dead_letter_value(VIEWS, 0, 7, b"k", b"{}", "bad", 1, huge))
    assert raw["headers"] is None and raw["headers_truncated"] is True


def test_the_loop_names_the_record_whose_dead_letter_takes_its_timestamp_and_headers():
    record = SimpleNamespace(topic=VIEWS, partition=2, offset=9, timestamp=555, headers=HEADERS)
    handling(record)
    out = json.loads(dead_letter("tiers", "dl", VIEWS, 2, 9, b"u1", b"{", "bad").value)
    assert (out["timestamp"], len(out["headers"])) == (555, 3)
    assert out["join"] == "tiers"  # a topic several joins read: each dead letter names its own
    other = json.loads(dead_letter("tiers", "dl", VIEWS, 2, 10, b"u1", b"{", "bad").value)
    assert (other["timestamp"], other["headers"]) == (None, None)  # not the record handed over
    handling(None)


def test_a_record_in_the_wrong_partition_is_sent_to_its_keys_partition():
    p, reason = wrong()
    v = judge()(letter(view(), reason, partition=p), None)
    assert (v.action, v.topic, v.partition) == ("send", VIEWS, partition_for(b"u1", 4))
    assert v.record == Original(b"u1", view(), NOW - 60_000, HEADERS)
    assert v.detail.endswith(f"(was partition {p}), from the dead letter's copy")


def test_a_record_that_still_fails_is_not_sent_and_is_counted_by_rule():
    j = judge()
    bad = j(letter(b'{"id": "v2", "user_id": "u1"', "not valid JSON", offset=1), None)
    assert (bad.action, bad.reason) == ("fails", "invalid")
    ahead = view(t=NOW + 3_600_000)
    future = j(letter(ahead, "from the future", offset=2, timestamp=NOW), None)
    assert (future.action, future.reason) == ("fails", "future")
    other_key = j(letter(view(user="u2"), "key disagrees", offset=3), None)  # key u1, u2 inside
    assert (other_key.action, other_key.reason) == ("fails", "invalid")


def test_each_record_is_judged_once_and_unknown_topics_are_skipped():
    j = judge()
    p, reason = wrong()
    first = j(letter(view(), reason, partition=p), None)
    again = j(letter(view(), reason, partition=p), None)  # the worker dead-lettered it twice
    assert (first.action, again.action, again.reason) == ("send", "skip", "duplicate")
    other = j(letter(view(), "bad", topic="nobody-reads-this"), None)
    assert (other.action, other.reason) == ("skip", "not an input")
    gone = Judge(inputs_of([resolve(TIERS)]), {}, NOW, 60_000)(letter(view(), "bad"), None)
    assert (gone.action, gone.reason) == ("skip", "no such topic")


def test_a_cause_the_rules_cannot_see_is_skipped_unless_asked_for():
    refused = "output refused by the broker: MessageSizeTooLargeError() (output to x, key 'v1')"
    assert judge()(letter(view(), refused), None).reason == "output refused"
    assert judge()(letter(view(), "internal error: RuntimeError('boom')"), None).reason == (
        "internal error"
    )
    final = "join v1 is final (its event time 5 is behind the horizon 9): ..."
    assert judge()(letter(view(), final), None).reason == "final join"
    assert judge(unchecked=True)(letter(view(), refused), None).action == "send"


def test_the_original_in_its_topic_is_preferred_and_a_cut_dead_letter_needs_it():
    big = view(blob="x" * MAX_KEPT_BYTES)  # an extra field: ignored by the parser
    cut = letter(big, "bad")
    assert judge()(cut, None).reason == "original gone"
    original = Original(b"u1", big, NOW - 60_000, [("trace", b"t-1")])
    v = judge()(cut, original)
    assert v.action == "send" and v.record == original  # the whole value, its headers
    assert v.detail.endswith(", from the input topic")
    old = letter(view(), "bad", timestamp=None, headers=None)  # written before they were kept
    assert judge()(old, None).reason == "original gone"
    kept = Original(b"u1", view(), NOW - 30_000, [])
    assert judge()(old, kept).record == kept
    # another record at that position (a topic made again): the dead letter's exact copy
    other = Original(b"u9", view(user="u9"), NOW, [])
    assert judge()(letter(view(), "bad"), other).record == Original(
        b"u1", view(), NOW - 60_000, HEADERS
    )


def test_without_the_partitioner_check_a_record_keeps_its_partition():
    p, reason = wrong()
    assert judge(check_partitioner=False)(letter(view(), reason, partition=p), None).partition == p


def test_a_repartitioned_sides_own_topic_is_judged_by_its_hop_and_keeps_its_partition():
    spec = copy.deepcopy(TIERS)
    spec["events"]["repartition"] = True
    j = judge(spec)
    v = j(letter(view(), "bad", key=b"session-3", partition=3), None)
    assert (v.action, v.partition) == ("send", 3)  # the hop takes any key and partition
    bad = j(letter(json.dumps({"id": "v1", "page": "/"}).encode(), "bad", offset=8), None)
    assert (bad.action, bad.reason) == ("fails", "invalid")
    assert "user_id" in bad.detail


def test_the_summary_counts_what_was_sent_what_still_fails_and_what_was_skipped():
    s = Summary("etj-dead-letters", dry_run=False, read=4, last_written=NOW)
    s.verdicts = [
        Verdict("send", "sent", "etj-page-views[2]@7 -> partition 1 (was partition 2)"),
        Verdict("fails", "invalid", "etj-page-views[0]@1: invalid EtjPageViewsIn: …"),
        Verdict("skip", "duplicate", "etj-page-views[2]@7: dead-lettered more than once"),
        Verdict("skip", "output refused", "etj-page-views[0]@3: output refused …"),
    ]
    assert s.lines() == [
        "dead letters replay from etj-dead-letters",
        "read 4",
        "sent 1",
        "still failing 1: invalid 1",
        "skipped 2: duplicate 1, output refused 1",
        "  sent: etj-page-views[2]@7 -> partition 1 (was partition 2)",
        "  still fails [invalid]: etj-page-views[0]@1: invalid EtjPageViewsIn: …",
        "  skipped [duplicate]: etj-page-views[2]@7: dead-lettered more than once",
        "  skipped [output refused]: etj-page-views[0]@3: output refused …",
        f"next run, to repeat none of these: --since {NOW + 1} (the dead letters written "
        "after the last one read)",
    ]
    s.dry_run = True
    assert s.lines()[0].endswith("(dry run: nothing is sent)") and s.lines()[2] == "would send 1"


def test_a_dimension_tombstone_an_older_worker_dead_lettered_is_sent_an_event_s_is_not():
    """A tombstone is a delete on a dimension now (app.inputs.tombstones): the one an older
    worker dead-lettered ("empty value") is replayed, with its key and timestamp; one on the
    events topic still fails, saying it deletes nothing."""
    old = "empty value (tombstone or null): nothing to join"
    j = judge()
    ended = j(letter(None, old, key=b"u1", topic="etj-user-tiers", offset=3), None)
    assert (ended.action, ended.topic, ended.partition) == (
        "send",
        "etj-user-tiers",
        partition_for(b"u1", 4),
    )
    assert ended.record == Original(b"u1", None, NOW - 60_000, HEADERS)
    event = j(letter(None, old, key=b"u1", offset=4), None)
    assert (event.action, event.reason) == ("fails", "invalid")
    assert "on an events topic is not a delete" in event.detail


def test_a_topic_several_joins_read_is_judged_by_the_join_that_refused_it_and_sent_once():
    """``tiers`` and ``regions`` read the same page views; ``regions`` also needs a region.
    A dead letter is judged by its own join's rules: ``regions``' still fails (no region yet)
    though ``tiers`` would take the record; a record both refused, fixed since, is sent once
    (every join reading the topic is handed it)."""
    regions = {
        **copy.deepcopy(TIERS),
        "name": "regions",
        "output": "etj-regions",
        "ticks": "etj-regions-ticks",
    }
    regions["events"]["fields"]["region"] = "str"
    j = Judge(
        inputs_of([resolve(TIERS), resolve(regions)]),
        {VIEWS: 4, "etj-user-tiers": 4},
        NOW,
        60_000,
    )
    p = partition_for(b"u1", 4)

    def of(join: str, value: bytes, offset: int) -> Any:
        raw = dead_letter_value(VIEWS, p, offset, b"u1", value, "bad", NOW - 60_000, HEADERS, join)
        return read_dead_letter(raw)

    no_region = j(of("regions", view(), 7), None)
    assert (no_region.action, no_region.reason) == ("fails", "invalid")
    assert "region" in no_region.detail
    assert j.join_of(of("regions", view(), 7)) == "regions"
    assert j(of("tiers", view(), 9), None).action == "send"  # tiers takes it as it is
    fixed = view(region="eu")  # both refused it (a bug since fixed), both take it now
    assert [
        (v.action, v.reason)
        for v in (j(of("tiers", fixed, 8), None), j(of("regions", fixed, 8), None))
    ] == [
        ("send", "sent"),
        ("skip", "duplicate"),
    ]
