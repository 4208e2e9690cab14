"""app.compat: the one home of the patches to Faust and aiokafka, and its version guard."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.compat.versions import TESTED, UntestedVersion, check_versions

APP = Path(__file__).resolve().parents[2] / "app"
THIRD_PARTY = ("faust", "aiokafka", "mode")


def test_the_installed_versions_are_the_tested_ones():
    check_versions()  # what pyproject.toml pins must pass


def test_an_untested_version_is_refused_naming_both_libraries():
    with pytest.raises(UntestedVersion) as err:
        check_versions({"faust-streaming": "0.16.0", "aiokafka": "0.13.1"})
    text = str(err.value)
    assert "faust-streaming 0.16.0" in text and "aiokafka 0.13.1" in text
    assert TESTED["faust-streaming"] in text and "refusing to start" in text


def test_a_missing_library_is_refused():
    with pytest.raises(UntestedVersion, match="aiokafka is not installed"):
        check_versions({"faust-streaming": "0.15.3"})


def test_pyproject_pins_exactly_the_tested_versions():
    pyproject = (APP.parent / "pyproject.toml").read_text()
    for dist, spec in TESTED.items():
        assert f'"{dist}{spec}"' in pyproject, f"pyproject.toml must pin {dist}{spec}"


def _third_party_names(tree: ast.Module) -> set[str]:
    """Names a module binds to something imported from Faust, aiokafka or mode."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in THIRD_PARTY:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] in THIRD_PARTY}
    return names


def test_only_app_compat_assigns_to_faust_or_aiokafka_attributes():
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        if "compat" in path.relative_to(APP).parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported = _third_party_names(tree)
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                       else [])
            for t in targets:
                base = t
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(t, ast.Attribute) and isinstance(base, ast.Name) \
                        and base.id in imported:
                    offenders.append(f"{path.relative_to(APP.parent)}:{node.lineno}")
    assert offenders == [], f"patches belong in app/compat: {offenders}"


def test_the_check_catches_a_patch_outside_compat(tmp_path):
    tree = ast.parse("from faust.topics import Topic\nTopic.send = None\n")
    assert "Topic" in _third_party_names(tree)
