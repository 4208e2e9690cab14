"""Process-wide counters (Prometheus client), incremented by the agents, read by the views."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

records_in = Counter("etj_records_in", "Input records consumed", ["topic"])
dead_letters = Counter("etj_dead_letters", "Records sent to the dead-letter topic", ["topic"])
late_records = Counter("etj_late_records", "Records older than the retention horizon", ["topic"])
revisions_out = Counter("etj_revisions", "Revisions emitted to the output topic", ["cause"])
joins_finalised = Counter("etj_joins_finalised", "Joins dropped from state past the horizon")
stream_time = Gauge("etj_stream_time_ms", "Greatest event time seen", ["partition"])
