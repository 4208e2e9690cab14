"""A joins file written before the wire models moved (``app.records`` -> ``app.inputs.records``)
still resolves: a model is named by ``module:Class`` in a user's file (docs/joins/declarative.md)."""

from __future__ import annotations

from app.inputs.records import MoodIn
from app.joins.catalog import mood_spec
from app.joins.resolve import resolve
from app.settings import Settings


def test_a_model_named_by_its_old_module_is_the_same_model():
    raw = mood_spec(Settings(_env_file=None)).copy()
    old = {**raw, "dimension": {**raw["dimension"], "model": "app.records:MoodIn"}}
    assert resolve(old).dimension.model is MoodIn
