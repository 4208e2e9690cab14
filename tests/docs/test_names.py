"""The names the docs give exist: every ``ETJ_*`` variable is a setting or one of the few
documented variables of ``make run``/the tests/the benchmarks, every setting is documented,
every ``config.*`` Helm value is in the chart, and every file of the repository they name is
there."""

from __future__ import annotations

import re

import yaml

from app.settings import Settings
from tests.docs.pages import DOCS, ROOT, pages

SETTINGS = {"ETJ_" + name.upper() for name in Settings.model_fields}
#: an ETJ_ name, not a pattern (``ETJ_KAFKA_*``, ``ETJ_<NAME>``, ``ETJ_…``)
ETJ_NAME = re.compile(r"ETJ_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*…<])")
TESTS_PAGE = DOCS / "contributing" / "tests.md"


def documented_variables() -> set[str]:
    """The names of the table "Variables that are not settings" (docs/contributing/tests.md)."""
    text = TESTS_PAGE.read_text(encoding="utf-8")
    section = text.split("## Variables that are not settings", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(ETJ_[A-Z0-9_]+)` \|", section, re.M))


def test_every_etj_name_in_the_docs_is_a_setting_or_a_documented_variable():
    variables = documented_variables()
    assert variables, "the table of variables that are not settings is gone"
    assert not variables & SETTINGS, "a setting listed as not a setting"
    unknown = {
        f"{page.relative_to(ROOT)}: {name}"
        for page in pages()
        for name in ETJ_NAME.findall(page.read_text("utf-8"))
        if name not in SETTINGS | variables
    }
    assert not unknown, "neither a setting nor a documented variable:\n" + "\n".join(
        sorted(unknown)
    )


def test_each_documented_variable_is_read_by_the_code():
    code = "".join(
        p.read_text("utf-8", errors="replace")
        for pattern in ("app/**/*.py", "tests/**/*.py", "bench/**/*.py", "Makefile")
        for p in ROOT.glob(pattern)
        if p.resolve() != (ROOT / __file__).resolve()
    )
    for name in documented_variables():
        assert f'"{name}"' in code or f"{name}=" in code, f"{name} is documented, never read"


def test_every_setting_is_documented():
    page = (DOCS / "operating" / "settings.md").read_text("utf-8")
    missing = [env for env in SETTINGS if f"| `{env}` |" not in page]
    assert not missing, missing


def test_every_helm_config_value_the_docs_name_is_in_the_chart():
    values = yaml.safe_load((ROOT / "helm" / "etj" / "values.yaml").read_text())["config"]
    named = {
        (page.relative_to(ROOT).as_posix(), name)
        for page in pages()
        for name in re.findall(r"`config\.([a-z0-9_]+)", page.read_text("utf-8"))
    }
    assert named, "the docs name no config.* value"
    missing = sorted(f"{page}: config.{name}" for page, name in named if name not in values)
    assert not missing, "not in helm/etj/values.yaml:\n" + "\n".join(missing)


#: a path of the repository (``app/outputs/delivery.py``, ``tests/oracle.py``, ``helm/etj/...``)
REPO_PATH = re.compile(r"(?<![\w/.-])((?:app|tests|bench|helm|docs)/[\w./-]*\w)")


def test_every_file_of_the_repository_the_docs_name_exists():
    missing = sorted(
        {
            f"{page.relative_to(ROOT)}: {path}"
            for page in pages()
            for path in REPO_PATH.findall(page.read_text("utf-8"))
            if not (ROOT / path).exists() and not path.startswith("bench/results/")
        }
    )  # written by `make bench`
    assert not missing, "named in the docs, not in the repository:\n" + "\n".join(missing)
