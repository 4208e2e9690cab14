"""Every Kafka topic etj reads or writes, named from settings (DESIGN §1).

Inputs are read as raw bytes: validation happens in :mod:`app.records`, so a bad record becomes
a dead letter instead of a codec exception inside Faust.
"""

from __future__ import annotations

from app.faust_app import app, settings

_raw = dict(key_serializer="raw", value_serializer="raw", partitions=settings.partitions)

# The mood join consumes both inputs and its own ticks in ONE agent: a single sequential loop
# per worker means table reads and writes of both sides never interleave.
mood_join_inputs = app.topic(settings.moods_topic, settings.events_topic, settings.ticks_topic,
                             allow_empty=True, **_raw)
ticks = app.topic(settings.ticks_topic, internal=True, **_raw)  # (partition p) -> revisit p

mood_recommendations = app.topic(settings.output_topic, key_serializer="raw",
                                 value_serializer="raw")  # join id -> revision
dead_letters = app.topic(settings.dead_letter_topic, key_serializer="raw",
                         value_serializer="raw")  # original key -> record + reason
late = app.topic(settings.late_topic, key_serializer="raw",
                 value_serializer="raw")  # original key -> record + horizon

# The car join (DESIGN §2, one-to-many). Car side: arrivals (key car id) -> moves keyed by zone
# id. Zone side: ONE agent reads zones and moves, co-partitioned by zone id (same key bytes,
# same partition count), so a zone's reading and its cars are owned and updated together.
car_arrivals = app.topic(settings.car_arrivals_topic, allow_empty=True, **_raw)
car_moves = app.topic(settings.car_moves_topic, internal=True,
                      **_raw)  # zone id -> {op: ADD|DEL, zone_id, car_id, arrival fields}
car_pollution_inputs = app.topic(settings.zones_topic, settings.car_moves_topic,
                                 allow_empty=True, **_raw)
car_pollution = app.topic(settings.car_pollution_topic, key_serializer="raw",
                          value_serializer="raw")  # car id -> car x zone pollution
