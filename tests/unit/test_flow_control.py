"""Flow control (app.inputs.flow_control): event-time order under a backlog, no wait when live."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.inputs.flow_control import EventTimeMerge

TOPICS = ("dim", "ev")


def merged(a: list[tuple[int, str]], b: list[tuple[int, str]]) -> list[str]:
    """Two FIFOs merged by always taking the smaller head (ties: the first input)."""
    out, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        if j == len(b) or (i < len(a) and a[i][0] <= b[j][0]):
            out.append(a[i][1])
            i += 1
        else:
            out.append(b[j][1])
            j += 1
    return out


times = st.lists(st.integers(0, 50), max_size=25)


@given(times, times, st.lists(st.sampled_from(TOPICS), max_size=80))
def test_a_backlog_is_handled_in_event_time_order(dim_times, ev_times, interleaving):
    """Everything is in the broker before the worker reads it; whatever order the fetches
    deliver the two inputs in, the join sees them merged by event time."""
    inputs = {
        "dim": [(t, f"d{n}") for n, t in enumerate(dim_times)],
        "ev": [(t, f"e{n}") for n, t in enumerate(ev_times)],
    }
    delivered = dict.fromkeys(TOPICS, 0)
    in_broker = {t: len(v) for t, v in inputs.items()}
    merge = EventTimeMerge(TOPICS, lambda t, p, nxt: delivered[t] < in_broker[t], clock=lambda: 0.0)
    order = list(interleaving) + ["dim"] * len(dim_times) + ["ev"] * len(ev_times)
    out: list[str] = []
    for topic in order:
        if delivered[topic] == in_broker[topic]:
            continue
        event_time, item = inputs[topic][delivered[topic]]
        delivered[topic] += 1
        out += merge.offer(topic, 0, delivered[topic] - 1, event_time, item)
    assert out == merged(inputs["dim"], inputs["ev"])
    assert merge.waiting() == 0 and merge.forced == 0


@given(st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 50)), max_size=60))
def test_live_traffic_never_waits(arrivals):
    """No input has records left in the broker: each record goes the moment it arrives."""
    merge = EventTimeMerge(TOPICS, lambda t, p, nxt: False)
    for n, (topic, event_time) in enumerate(arrivals):
        assert merge.offer(topic, n % 3, n, event_time, n) == [n]
    assert merge.waiting() == 0


def test_a_wait_for_a_lagging_input_ends_after_max_idle():
    now = [0.0]
    merge = EventTimeMerge(
        TOPICS, lambda t, p, nxt: t == "ev", max_idle_s=2.0, clock=lambda: now[0]
    )
    assert merge.offer("dim", 1, 0, 10, "d0") == []  # ev has records in the broker: wait
    assert merge.waiting_partitions() == [1]
    now[0] = 1.9
    assert merge.poll() == []
    now[0] = 2.0
    assert merge.poll() == ["d0"] and merge.forced == 1
    # still nothing from ev: the rest of dim flows without a new wait
    assert merge.offer("dim", 1, 1, 11, "d1") == ["d1"]
    # ev delivers (dim has nothing left in the broker): it goes, the wait is over
    assert merge.offer("ev", 1, 0, 5, "e0") == ["e0"]
    assert merge.waiting_partitions() == []


def test_a_new_wait_restarts_the_idle_clock():
    now = [0.0]
    lagging = {"ev"}
    merge = EventTimeMerge(
        TOPICS, lambda t, p, nxt: t in lagging, max_idle_s=2.0, clock=lambda: now[0]
    )
    assert merge.offer("dim", 0, 0, 10, "d0") == []
    now[0] = 5.0
    assert merge.poll() == ["d0"]
    lagging.clear()
    assert merge.offer("ev", 0, 0, 12, "e0") == ["e0"]
    lagging.add("dim")  # now dim is behind: ev waits a full max_idle again
    assert merge.offer("ev", 0, 1, 13, "e1") == []
    now[0] = 6.9
    assert merge.poll() == []
    now[0] = 7.0
    assert merge.poll() == ["e1"]


def test_a_full_buffer_stops_the_fetch_of_its_inputs_and_lets_nothing_go_early():
    """One fetch can hold more records than the bound: let go, they ran stream time ahead of
    the lagging input (10,549 of a 100,000-record backlog late). The engine stops fetching the
    inputs :meth:`EventTimeMerge.full` names instead, until the lagging one catches up."""
    merge = EventTimeMerge(TOPICS, lambda t, p, nxt: t == "ev", max_buffered=3, clock=lambda: 0.0)
    merge.offer_batch("dim", 0, [(1, 0, "a"), (2, 1, "b"), (3, 2, "c")], None)
    assert merge.release(0) == [] and merge.forced == 0
    assert merge.full(0) == ("dim",) and merge.full(1) == ()
    merge.offer_batch("ev", 0, [(2, 0, "e")], 1)  # the lagging input came: in order, all go
    assert merge.release(0) == ["a", "b", "e", "c"] and merge.full(0) == ()


def test_partitions_are_independent_and_reset_forgets():
    merge = EventTimeMerge(TOPICS, lambda t, p, nxt: p == 0 and t == "ev", clock=lambda: 0.0)
    assert merge.offer("dim", 0, 0, 1, "p0") == []
    assert merge.offer("dim", 1, 0, 1, "p1") == ["p1"]
    merge.reset()
    assert merge.waiting() == 0 and merge.poll() == []


def test_disabled_is_arrival_order():
    merge = EventTimeMerge(TOPICS, lambda t, p, nxt: True, enabled=False)
    assert merge.offer("dim", 0, 0, 9, "x") == ["x"]
