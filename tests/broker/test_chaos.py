"""The chaos run (tests/chaos/), short: all three joins under steady out-of-order traffic
while a worker is killed -9, restarted gracefully, joined by a new one, and the broker stops
answering; at the end every answer is exact, every input record accounted for, revision
numbers have no gaps, and no worker process grew its memory by more than 30 % beyond what its
state filling the retention window explains.

The broker is started for this test alone, whatever ``ETJ_BOOTSTRAP`` says: pausing it is one
of the faults. A broker kill -9 + restart needs durable storage, which the bundled broker has
only in S3 (``tests.harness.S3Broker``), served here by moto, which cannot carry this traffic
(one core at 80-100 %, answers minutes behind: docs/contributing/performance-log.md, chaos run); that fault is
left to ``python -m bench.chaos --durable-broker`` and ``test_faults_broker_restart.py``.
"""

from __future__ import annotations

import json

from tests.chaos import MEMORY_BROKER_KINDS, run


def test_two_minutes_of_faults_every_join_exact_nothing_lost(tmp_path):
    # ~20 s apart, each kind in turn: kill9, graceful, rebalance (a new worker joins),
    # broker_pause, then kill9 again; the faults hit w2, w1, w0 in turn, so w1's and w2's
    # new processes and x1 live ~60-100 s: RSS is compared over 30 s after a 30 s warm-up
    result = run(
        minutes=2,
        rate=100,
        every_s=(18, 22),
        kinds=list(MEMORY_BROKER_KINDS),
        warm_up_s=30,
        settle_s=150,
        folder=tmp_path,
    )
    shown = json.dumps({k: v for k, v in result.items() if k != "rss_per_incarnation"}, default=str)
    assert result["chaos_fault_kinds"].keys() == set(MEMORY_BROKER_KINDS), shown
    assert result["chaos_faults"] >= 5, shown
    assert result["chaos_lost"] == 0, shown
    assert result["chaos_wrong"] == 0, shown
    assert result["chaos_gaps"] == 0, shown
    assert result["chaos_dead_letters"] == result["chaos_late"] == 0, shown
    # memory is compared from the moment the joins' state spans its retention window (100 s
    # of traffic): before it, a first incarnation's RSS grows with the state it fills and the
    # partitions it takes over from the killed and stopped workers (w0: 1.18 here, 1.31 on the
    # CI runner), which is not a leak; the incarnations that live on after it (w1's, w2's, x1)
    # are held to the long run's goal
    assert result["rss_compared_filled"] >= 1, shown
    assert result["chaos_rss_growth_ratio_filled"] <= 1.3, result["rss_per_incarnation"]
