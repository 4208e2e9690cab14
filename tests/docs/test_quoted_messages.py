"""Messages the docs quote are the code's: made here by the code that says them."""

from __future__ import annotations

import pytest

from app.kafka.copartition import CopartitionError, check_groups
from app.settings import Settings
from tests.docs.pages import DOCS, block


def test_the_copartition_refusal_quoted_is_the_real_one():
    s = Settings.model_construct()
    quoted = block(DOCS / "concepts" / "event-time.md", "copartition-error").strip()
    with pytest.raises(CopartitionError) as exc:
        check_groups(
            {s.events_topic: 2, s.moods_topic: 4},
            [("join 'moods'", (s.events_topic, s.moods_topic, s.ticks_topic), s.partitions)],
        )
    assert str(exc.value) == quoted
