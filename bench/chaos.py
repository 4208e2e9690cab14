"""The chaos run (:mod:`tests.chaos`) as a benchmark: ten minutes of traffic and faults, its
figures held to their goals.

``python -m bench.chaos [--minutes 10] [--workers 3] [--rate 360] [--seed 1] [--durable-broker]
[--batching]``
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from tests.chaos import run as chaos_run

GOALS = {"chaos_lost": 0, "chaos_wrong": 0, "chaos_rss_growth_ratio": 1.3}


def run(**kwargs: Any) -> dict[str, Any]:
    result = chaos_run(**kwargs)
    result["goals"] = GOALS
    result["goals_met"] = (result["chaos_lost"] == 0 and result["chaos_wrong"] == 0 and
                           (result["chaos_rss_growth_ratio"] or 0) <= 1.3)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rate", type=float, default=360, help="input records/s, all joins")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--store", default="rocksdb://")
    p.add_argument("--durable-broker", action="store_true",
                   help="broker log in S3 (moto): adds the broker_restart fault")
    p.add_argument("--batching", action="store_true",
                   help="the workers' producers batch (ETJ_END_OFFSETS_BY_FETCH=true)")
    a = p.parse_args(argv)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the faults make it shout
    result = run(minutes=a.minutes, workers=a.workers, rate=a.rate, seed=a.seed, store=a.store,
                 durable_broker=a.durable_broker, batching=a.batching)
    print(json.dumps(result, indent=2, default=str))
    return 0 if result["goals_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
