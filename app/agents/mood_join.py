"""Agent: recommendations x moods — the ``moods`` join spec on the generic engine.

The join itself is configuration (:func:`app.joins.catalog.mood_spec`: left mode, strictly-before
as-of rule, per-key layout) run by :mod:`app.agents.event_join`. This module keeps the names the
rest of the code and the tests use: the agent ``mood_join``, the set ``_resumed`` of partitions
whose recovered revisions were re-emitted, and the per-record steps.
"""

from __future__ import annotations

from app.agents.event_join import Out, engines

__all__ = ["Out", "engine", "mood_join", "on_input", "on_tick", "resume"]

engine = engines["moods"]
mood_join = engine.agent
_resumed = engine.resumed

on_input = engine.on_input  # one mood or recommendation -> what to send
on_tick = engine.on_tick  # revisit a partition -> corrections
resume = engine.resume  # re-emit a recovered partition's revisions, once per assignment
