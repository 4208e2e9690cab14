"""The settings page, the Helm values page and the chart's values schema are generated from one
source each (:mod:`app.docgen.settings_doc`): a test run fails when one of them drifted.

Fix: ``python -m app.docgen.settings_doc`` (it rewrites all three), then commit what it wrote.
"""

from __future__ import annotations

import json
import re

import pytest

from app.docgen import settings_doc, tests_index
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


def test_the_tests_page_module_table_is_what_the_tests_give_now():
    """A test file added, renamed or changed to import another module moves the table."""
    assert tests_index.PAGE.read_text(encoding="utf-8") == tests_index.page(), (
        "docs/contributing/tests.md's module table is stale: run "
        "`python -m app.docgen.tests_index` and commit what it wrote"
    )


def test_the_module_table_follows_imports_names_and_the_harness(tmp_path):
    """What counts as covering a module: an import (deferred too), a path or a dotted name in
    the text, and a helper of tests/ that a test file imports; a module nothing names has no
    test."""
    (tmp_path / "app" / "x").mkdir(parents=True)
    for name in ("a", "b", "c", "d", "e"):
        (tmp_path / "app" / "x" / f"{name}.py").write_text("")
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "harness.py").write_text("from app.x.d import thing\n")
    (tmp_path / "tests" / "unit" / "test_one.py").write_text(
        "def test():\n    from app.x import a\n"
    )
    (tmp_path / "tests" / "unit" / "test_two.py").write_text(
        '"""See app/x/b.py and app.x.c.Name."""\nfrom tests.harness import thing\n'
    )
    assert tests_index.coverage(tmp_path) == {
        "app/x/a.py": ["tests/unit/test_one.py"],
        "app/x/b.py": ["tests/unit/test_two.py"],
        "app/x/c.py": ["tests/unit/test_two.py"],
        "app/x/d.py": ["tests/unit/test_two.py"],
        "app/x/e.py": [],
    }


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
