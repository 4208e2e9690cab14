"""A rolling restart of the chart's two pods under live traffic: each pod stopped (SIGTERM) and
started again on its volume, as a StatefulSet's RollingUpdate does; the answers exact, the
longest time a partition went unanswered and the time the views answered 503 printed
(tests/image/rollout.py says what each figure is; ``bench.rolling_restart`` holds them as
``make bench`` keys: no time is asserted here, docs/contributing/tests.md#time-in-a-test).
"""

from __future__ import annotations

import sys

from tests.image.rollout import rolling_restart


async def test_a_rolling_restart_of_both_pods_under_traffic_is_exact(names, containers, tmp_path):
    def start(pod: str, volume: str | None, web_port: int | None):
        return containers(names, pod, volume=volume, web_port=web_port)

    rollout = await rolling_restart(start, names, record=tmp_path / "rollout.json")
    print(f"\n{rollout.summary()}", file=sys.stderr)
