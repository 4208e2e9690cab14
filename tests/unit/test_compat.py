"""app.compat: the one home of the patches to Faust and aiokafka, and its version guard."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.compat import versions
from app.compat.upstream_audit import imported_upstream_names
from app.compat.versions import TESTED, UntestedVersion, check_versions

APP = Path(__file__).resolve().parents[2] / "app"


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


def test_untested_versions_turns_the_refusal_into_a_warning(monkeypatch, caplog):
    """ETJ_UNTESTED_VERSIONS=1 (make compat-check) lets the installed versions be others."""
    monkeypatch.setattr(versions, "version", lambda dist: "0.0.1")
    monkeypatch.delenv("ETJ_UNTESTED_VERSIONS", raising=False)
    with pytest.raises(UntestedVersion):
        check_versions()
    monkeypatch.setenv("ETJ_UNTESTED_VERSIONS", "1")
    with caplog.at_level("WARNING", logger="app.compat.versions"):
        check_versions()
    assert "ETJ_UNTESTED_VERSIONS is set: starting anyway" in caplog.text
    assert "aiokafka 0.0.1 is installed" in caplog.text
    with pytest.raises(UntestedVersion):  # versions given (the tests): the setting is not read
        check_versions({"faust-streaming": "0.16.0", "aiokafka": "0.13.1"})


def test_pyproject_pins_exactly_the_tested_versions():
    pyproject = (APP.parent / "pyproject.toml").read_text()
    for dist, spec in TESTED.items():
        assert f'"{dist}{spec}"' in pyproject, f"pyproject.toml must pin {dist}{spec}"


def test_only_app_compat_assigns_to_faust_or_aiokafka_attributes():
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        if "compat" in path.relative_to(APP).parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        imported = imported_upstream_names(tree)
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                else []
            )
            for t in targets:
                base = t
                while isinstance(base, ast.Attribute):
                    base = base.value
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(base, ast.Name)
                    and base.id in imported
                ):
                    offenders.append(f"{path.relative_to(APP.parent)}:{node.lineno}")
    assert offenders == [], f"patches belong in app/compat: {offenders}"


def test_the_check_catches_a_patch_outside_compat(tmp_path):
    tree = ast.parse("from faust.topics import Topic\nTopic.send = None\n")
    assert "Topic" in imported_upstream_names(tree)


def _package_imports() -> dict[str, set[str]]:
    """app subpackage -> the other app subpackages its modules import."""
    edges: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP).parts
        if len(parts) < 2:
            continue  # a top-level module (app/topology.py ...) is no package
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            mods = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for mod in mods:
                bits = mod.split(".")
                if (
                    len(bits) > 1
                    and bits[0] == "app"
                    and (APP / bits[1]).is_dir()
                    and bits[1] != parts[0]
                ):
                    edges.setdefault(parts[0], set()).add(bits[1])
    return edges


def test_no_import_cycle_between_packages():
    edges = _package_imports()
    assert "joins" in edges.get("agents", set())  # the check sees real imports

    def reaches(a: str, b: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            n == b or (n not in seen and reaches(n, b, seen | {n})) for n in edges.get(a, ())
        )

    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if reaches(b, a))
    assert cycles == [], cycles


# --- no read of a private Faust / aiokafka / mode attribute outside app/compat --------------


def _private_names_defined(trees: list[ast.AST]) -> set[str]:
    """Every ``_name`` (not dunder) a body of code defines: functions, classes, attributes
    assigned, names bound and ``__slots__`` entries."""
    names: set[str] = set()
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                names.add(n.attr)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in n.targets
            ):
                names |= {
                    c.value
                    for c in ast.walk(n.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def _upstream_private_names() -> set[str]:
    import aiokafka
    import faust
    import mode

    trees = []
    for pkg in (faust, aiokafka, mode):
        for path in Path(pkg.__file__).parent.rglob("*.py"):
            try:
                trees.append(ast.parse(path.read_text()))
            except (SyntaxError, UnicodeDecodeError):
                continue
    return _private_names_defined(trees)


def _private_upstream_reads(sources: dict[str, str], upstream: set[str]) -> list[str]:
    """``file:line .name`` for every read of an upstream private attribute (an attribute
    ``_name`` of anything but ``self``/``cls``, or ``getattr(x, "_name")``) that the code
    itself does not define (etj's own private names are its own business)."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    own = _private_names_defined(list(trees.values()))
    suspects = upstream - own
    hits = []
    for name, tree in trees.items():
        for n in ast.walk(tree):
            attr = None
            if isinstance(n, ast.Attribute) and not (
                isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
            ):
                attr = n.attr
            elif (
                isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "getattr"
                and len(n.args) >= 2
                and isinstance(n.args[1], ast.Constant)
            ):
                attr = n.args[1].value
            if isinstance(attr, str) and attr in suspects:
                hits.append(f"{name}:{n.lineno} .{attr}")
    return hits


def test_no_private_faust_or_aiokafka_attribute_is_read_outside_compat():
    sources = {
        str(p.relative_to(APP.parent)): p.read_text()
        for p in sorted(APP.rglob("*.py"))
        if "compat" not in p.relative_to(APP).parts
    }
    hits = _private_upstream_reads(sources, _upstream_private_names())
    assert hits == [], f"reads of private upstream attributes belong in app/compat: {hits}"


def test_the_private_read_check_catches_one():
    upstream = _upstream_private_names()
    assert {"_unacked_messages", "_dbs", "_ensure_producer"} <= upstream
    hits = _private_upstream_reads(
        {
            "x.py": "def f(app):\n    return len(app.consumer._unacked_messages)\n",
            "y.py": "def g(store):\n    return getattr(store, '_dbs')\n",
        },
        upstream,
    )
    assert hits == ["x.py:2 ._unacked_messages", "y.py:2 ._dbs"]
