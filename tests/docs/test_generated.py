"""The settings page, the Helm values page and the chart's values schema are generated from one
source each (:mod:`app.docgen.settings_doc`): a test run fails when one of them drifted.

Fix: ``python -m app.docgen.settings_doc`` (it rewrites all three), then commit what it wrote.
"""

from __future__ import annotations

import json
import re

import pytest

from app.docgen import settings_doc
from app.settings import Settings
from tests.docs.pages import README, ROOT


@pytest.mark.parametrize(
    "path", list(settings_doc.generated()), ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_the_generated_file_is_what_the_code_gives_now(path):
    want = settings_doc.generated()[path]
    have = path.read_text(encoding="utf-8") if path.exists() else ""
    assert have == want, (
        f"{path.relative_to(ROOT)} is stale: run `python -m app.docgen.settings_doc` "
        "and commit what it wrote"
    )


def test_the_settings_page_lists_every_setting_once_with_its_default():
    page = settings_doc.settings_page()
    rows = re.findall(r"^\| `(ETJ_[A-Z0-9_]+)` \| ([^|]+) \|", page, re.M)
    assert [env for env, _ in rows].count("ETJ_RETENTION_MS") == 1
    assert {env for env, _ in rows} == {"ETJ_" + n.upper() for n in Settings.model_fields}
    defaults = dict(rows)
    assert defaults["ETJ_RETENTION_MS"].strip() == "`3600000` (1 h)"
    assert defaults["ETJ_JOINS_FILE"].strip() == "unset"


def test_the_chart_schema_has_every_setting_the_chart_does_not_set_itself():
    schema = json.loads(settings_doc.HELM_SCHEMA.read_text())["properties"]["config"]
    assert set(schema["properties"]) == set(Settings.model_fields) - set(settings_doc.CHART_MANAGED)
    assert schema["additionalProperties"] is False


def test_the_helm_values_page_documents_every_value():
    page = settings_doc.helm_values_page()
    params = re.findall(r"^\s*## @param (\S+)", settings_doc.HELM_VALUES.read_text(), re.M)
    assert params and all(f"| `{p}` |" in page for p in params)


def test_the_readme_keeps_no_settings_table_of_its_own():
    """One place for settings: a copy in the README would drift."""
    assert not re.search(r"^\| `ETJ_[A-Z_]+` \|", README.read_text(), re.M)
