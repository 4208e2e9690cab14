"""bench/ and tests/ import each other one way only: bench → tests.

The benchmarks use the tests' harness, oracles, Kafka helpers and the chaos run; no test
imports a benchmark. When both ways existed, a benchmark read its oracles out of broker test
modules and a test ran a benchmark, so neither could change without the other, and whichever
moved broke the other's import at collection. Found by walking every module's syntax tree:
``import x``, ``from x import y`` (at any depth: inside a function too) and
``importlib.import_module("x")`` with a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "tests")


def imported_packages(source: str) -> set[str]:
    """The top-level packages a module imports (relative imports stay in its own package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module")):
            out.add(node.args[0].value.split(".")[0])
    return out


def crossings(root: Path) -> dict[str, list[str]]:
    """``"bench -> tests"`` and ``"tests -> bench"``: the modules that import the other package."""
    out: dict[str, list[str]] = {f"{a} -> {b}": [] for a in PACKAGES for b in PACKAGES if a != b}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for other in imported_packages(path.read_text(encoding="utf-8")) & set(PACKAGES):
                if other != package:
                    out[f"{package} -> {other}"].append(path.relative_to(root).as_posix())
    return out


def one_way(root: Path) -> str | None:
    """None when at most one direction exists; else what imports which, both ways."""
    found = crossings(root)
    if all(found.values()):
        return "\n".join(f"{way}: {', '.join(files)}" for way, files in found.items())
    return None


def test_bench_and_tests_import_each_other_one_way_only():
    both = one_way(ROOT)
    assert both is None, "bench/ and tests/ import each other both ways:\n" + both
    # a walk that found no import at all would pass the line above by finding nothing
    assert crossings(ROOT)["bench -> tests"], "the benchmarks use the tests' harness"


def test_the_check_fails_when_a_test_imports_a_benchmark(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench" / "b.py").write_text("from tests.oracle import exact_mood_joins\n")
    (tmp_path / "tests" / "t.py").write_text("import os\n")
    assert one_way(tmp_path) is None
    # deep in a function, as a lazy import would be
    (tmp_path / "tests" / "t.py").write_text("def f():\n    from bench import throughput\n")
    assert one_way(tmp_path) == "bench -> tests: bench/b.py\ntests -> bench: tests/t.py"
    (tmp_path / "tests" / "t.py").write_text(
        "import importlib\nimportlib.import_module('bench.chaos')\n")
    assert one_way(tmp_path) is not None
