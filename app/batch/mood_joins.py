"""The mood join over bounded data: the ``moods`` spec's instance of :mod:`app.batch.spec_joins`.

Same rules as the stream (docs/batch/index.md, "Same rules as the stream"):

- a recommendation at ``t`` joins its consultant's mood with the greatest ``event_time``
  strictly less than ``t``; none -> ``mood`` null;
- ties on mood event time: the greatest ``(event_time, mood)``, i.e. the lexicographically
  greatest mood string;
- join id = the recommendation's ``id``, else ``"r-" + sha1(consultant \\x1f event_time \\x1f
  recommendation)[:20]``.

The as-of methods, their plans and their measured costs: :mod:`app.batch.spec_joins`. This
module keeps the mood join's column names (``name``, ``consultant`` ...) as the functions'
interface, for the command line's ``--moods``/``--events`` and the benchmarks.
"""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import DataFrame

from app.batch import spec_joins as S
from app.batch.spec_joins import METHODS
from app.joins.catalog import mood_spec
from app.joins.resolve import resolve
from app.joins.spec import JoinSpec
from app.settings import Settings

__all__ = [
    "METHODS",
    "JOIN_COLUMNS",
    "REVISION_COLUMNS",
    "MOOD_SPEC",
    "mood_joins",
    "latest_revisions",
    "compare_joins",
    "backfill_revisions",
]


@lru_cache(maxsize=1)
def _mood_spec() -> JoinSpec:
    # the rules and fields do not depend on settings (only the topic names do)
    return resolve(mood_spec(Settings.model_construct()))


MOOD_SPEC = _mood_spec()
#: the answer of one join (what ``Revision.result`` compares), in wire order
JOIN_COLUMNS = S.answer_columns(MOOD_SPEC)
#: one record of the output revision log (the wire contract of etj-mood-recommendations)
REVISION_COLUMNS = S.revision_columns(MOOD_SPEC)


def mood_joins(moods: DataFrame, events: DataFrame, method: str = METHODS[0]) -> DataFrame:
    """The exact answer: one row per (consultant, join id), columns :data:`JOIN_COLUMNS`.

    ``moods``: (name, mood, event_time); ``events``: (consultant, recommendation, event_time, id).
    ``method``: one of :data:`METHODS` (same answer).
    """
    return S.spec_joins(MOOD_SPEC, events, moods, method)


def latest_revisions(revisions: DataFrame, order: str | None = "_pos") -> DataFrame:
    """Per join id, the highest revision (:func:`app.batch.spec_joins.latest_revisions`)."""
    return S.latest_revisions(MOOD_SPEC, revisions, order)


def compare_joins(exact: DataFrame, latest: DataFrame) -> DataFrame:
    """Matched / wrong / missing / extra by join id (:func:`app.batch.spec_joins.compare_joins`)."""
    return S.compare_joins(MOOD_SPEC, exact, latest)


def backfill_revisions(comparison: DataFrame) -> DataFrame:
    """Revisions onto the exact answer (:func:`app.batch.spec_joins.backfill_revisions`)."""
    return S.backfill_revisions(MOOD_SPEC, comparison)
