"""The mood join's state, time-bounded by event time (purged by the revisit, see timers).

All tables are partitioned like the inputs (key = consultant name, or partition number for the
per-partition bookkeeping), so a worker owns a consultant's moods, joins and clock together.
"""

from __future__ import annotations

import faust

from app.faust_app import app, settings
from app.range_scan import range_table

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


# --- car join (DESIGN §2, one-to-many); no time-based purge: each table holds *current* state,
# bounded by the number of cars and zones, not by event time ---------------------------------
# car side, partitioned like etj-car-arrivals:
# car id -> [event_time, zone_id, fuel_level, left_zone_id | None]  (its newest arrival)
car_positions = app.Table("car-positions", default=None, **_json)

# zone side, partitioned like etj-zones and car moves:
# zone id -> [event_time, pollution_level]  (newest by (event_time, pollution_level))
zone_pollution = app.Table("zone-pollution", default=None, **_json)
# key: (zone_id, car_id) as 16 bytes, big-endian, sign bit flipped (app.keys) -> byte order is
# (zone, car) order, so a zone's cars are one key range (app.range_scan)
# value: [car_event_time, fuel_level] of the arrival that put the car there
zone_cars = range_table(app, "zone-cars", default=None, partitions=settings.partitions)
