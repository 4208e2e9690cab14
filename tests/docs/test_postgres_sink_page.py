"""The PostgreSQL sink's page shows the tables and the upsert the code runs
(docs/operating/postgres-sink.md; app/downstream/postgres_sink.py)."""

from __future__ import annotations

from app.downstream.postgres_sink import create_sql, table_name_for, upsert_sql
from tests.docs.pages import DOCS, block

PAGE = DOCS / "operating" / "postgres-sink.md"


def test_the_tables_shown_are_the_ones_the_sink_creates():
    table = table_name_for("moods")
    assert block(PAGE, "sink-tables").strip() == ";\n\n".join(create_sql(table)) + ";"


def test_the_upsert_shown_is_the_one_the_sink_runs():
    assert block(PAGE, "sink-upsert").strip() == upsert_sql(table_name_for("moods")) + ";"
