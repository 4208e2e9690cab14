"""The mood join's state, time-bounded by event time (purged by the revisit, see timers).

All tables are partitioned like the inputs (key = consultant name, or partition number for the
per-partition bookkeeping), so a worker owns a consultant's moods, joins and clock together.
"""

from __future__ import annotations

import faust

from app.faust_app import app, settings

_json = dict(partitions=settings.partitions,
             schema=faust.Schema(key_serializer="json", value_serializer="json"))

# consultant -> [[event_time, mood], ...] sorted; the last mood before the horizon is kept
mood_history = app.Table("mood-history", default=None, **_json)

# consultant -> {join_id: [event_time, recommendation, mood, mood_event_time, revision, cause,
#                          previous_mood]}  (recent joins, newer than the horizon)
recent_joins = app.Table("recent-joins", default=None, **_json)

# partition -> stream time (greatest event time seen on it, across both inputs; never decreases)
stream_clock = app.Table("stream-clock", default=None, **_json)

# partition -> sorted [consultant, ...] with state the revisit still has to look at
active_keys = app.Table("active-keys", default=None, **_json)
