"""bench/ and tests/ import each other one way only: bench → tests.

The benchmarks use the tests' harness, oracles, Kafka helpers and the chaos run; no test
imports a benchmark. When both ways existed, a benchmark read its oracles out of broker test
modules and a test ran a benchmark, so neither could change without the other, and whichever
moved broke the other's import at collection. Found by walking every module's syntax tree:
``import x``, ``from x import y`` (at any depth: inside a function too) and
``importlib.import_module("x")`` with a literal name.

app/'s modules are held to three rules the same way (docs/contributing/architecture.md):

- **no import cycle** among them, counting every import a module names: at module level, in a
  function (deferred), under ``if TYPE_CHECKING``, by ``importlib`` and by the ``"app.x:Name"``
  strings Faust's settings and the join specs import from. Each cycle there was "fixed" by a
  deferred import, and each hid which of the two modules was the lower one;
- **no private name** (``_x``) of one app module imported by another or read from it as an
  attribute: a concept split over two files gets one home or a public name (tests may reach in);
- **Faust only where it may be**: the modules of :data:`FAUST_FREE` import neither faust nor
  mode, directly or through any app module they import (deferred imports and the packages
  Python runs first included): the batch twin's executors and the property tests run them.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import dataclass, field
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
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
        ):
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
        "import importlib\nimportlib.import_module('bench.chaos')\n"
    )
    assert one_way(tmp_path) is not None


# --- app/: no import cycle, no private name across modules, Faust only where it may be ---------

#: Faust and its service framework: what a module meant to run without Faust must not import
FAUST = frozenset({"faust", "mode"})
#: modules (a path) and packages (ending in /) meant to run without Faust: the join rules (the
#: batch twin and the property tests run them), the parsers (the batch twin and the tools), and
#: what the bootstrap's Spark executors import (they have no Faust): Kafka's partitioner and
#: the broker connection, the snapshot store, one partition's state files
FAUST_FREE = (
    "app/logic/",
    "app/inputs/records.py",
    "app/inputs/parsers.py",
    "app/inputs/time_formats.py",
    "app/inputs/paths.py",
    "app/inputs/wire_formats.py",
    "app/inputs/tombstones.py",
    "app/kafka/",
    "app/state/snapshot_store.py",
    "app/state/split_sorted.py",
    "app/outputs/revision_formats.py",
    "app/batch/state_files.py",
    "app/joins/fingerprint.py",
)
#: ``"app.x.y:Name"``: a name Faust (``symbol_by_name``) or a join spec imports from a string
SYMBOL = re.compile(r"app(?:\.\w+)+:\w+(?:\.\w+)*")


@dataclass
class Module:
    """One module of app/: the app modules it imports, with the first line that does (any
    depth: a deferred import and one under ``if TYPE_CHECKING`` count), the other top-level
    packages it imports, and each private name of another app module it reaches."""

    name: str
    path: str  # relative to the repository
    imports: dict[str, int] = field(default_factory=dict)
    packages: dict[str, int] = field(default_factory=dict)
    private: set[tuple[int, str]] = field(default_factory=set)


def app_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module and package of ``root``/app."""
    out = {}
    for path in sorted((root / "app").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def scan(root: Path) -> dict[str, Module]:
    """Every module of app/ with what it imports and reaches (:class:`Module`).

    ``from app.x import y`` is an import of ``app.x.y`` when that is a module, else of ``app.x``.
    A package run because one of its modules is imported is not counted as imported (importing
    ``app.x.y`` runs ``app.x`` first): only what a module names. Attributes: a name bound to an
    app module (``from app.x import y``, ``import app.x as y``, ``import app.x``) followed by
    ``._z`` is a private name of that module reached."""
    names = app_modules(root)

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    out: dict[str, Module] = {}
    for name, path in names.items():
        mod = out[name] = Module(name, path.relative_to(root).as_posix())
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        bound: dict[str, str] = {}  # a name in this module -> the app module it is

        def edge(target: str | None, line: int, mod: Module = mod) -> None:
            if target is not None and target != mod.name:
                mod.imports.setdefault(target, line)

        def reach(line: int, owner: str, attr: str, mod: Module = mod) -> None:
            if owner != mod.name:
                mod.private.add((line, f"{owner}.{attr}"))

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] != "app":
                        mod.packages.setdefault(alias.name.split(".")[0], node.lineno)
                        continue
                    target = resolve(alias.name)
                    edge(target, node.lineno)
                    if any(_private(p) for p in alias.name.split(".")):
                        reach(node.lineno, target or "app", alias.name)
                    if alias.asname is None:
                        bound["app"] = "app"
                    elif alias.name in names:
                        bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: from the module's own package up
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([source] if source else []))
                if source.split(".")[0] != "app":
                    if source:
                        mod.packages.setdefault(source.split(".")[0], node.lineno)
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in names:
                        edge(full, node.lineno)
                        bound[alias.asname or alias.name] = full
                    else:
                        edge(resolve(source), node.lineno)
                    if _private(alias.name):
                        reach(node.lineno, resolve(source) or source, alias.name)
            elif (
                isinstance(node, ast.Call)
                and node.args
                and ast.unparse(node.func) in ("importlib.import_module", "import_module")
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).split(".")[0] == "app"
            ):
                edge(resolve(node.args[0].value), node.lineno)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and SYMBOL.fullmatch(node.value)
            ):
                edge(resolve(node.value.partition(":")[0]), node.lineno)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if not isinstance(base, ast.Name) or base.id not in bound:
                continue
            owner = bound[base.id]
            for attr in reversed(chain):
                if f"{owner}.{attr}" in names:
                    owner = f"{owner}.{attr}"
                    continue
                if _private(attr):
                    reach(node.lineno, owner, attr)
                break
    return out


def import_cycles(modules: dict[str, Module]) -> list[str]:
    """Each group of app modules that import each other round (a strongly connected component),
    as one cycle through it: ``a (line 3) -> b (line 40) -> a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in modules[v].imports:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                group.append(stack.pop())
                if group[-1] == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        start, inside = group[0], set(group)
        came: dict[str, str] = {}
        queue, last = deque([start]), None
        while last is None:  # breadth first, from start back to it: a shortest cycle
            v = queue.popleft()
            for w in sorted(modules[v].imports):
                if w == start:
                    last = v
                    break
                if w in inside and w not in came and w != start:
                    came[w] = v
                    queue.append(w)
        path = [last]
        while path[-1] != start:
            path.append(came[path[-1]])
        path = [*reversed(path), start]
        out.append(
            " -> ".join(f"{a} (line {modules[a].imports[b]})" for a, b in zip(path, path[1:]))
            + f" -> {start}"
        )
    return out


def private_crossings(modules: dict[str, Module]) -> list[str]:
    """``path:line: app.x._y``: a private name of another app module, imported or read."""
    return [
        f"{m.path}:{line}: {what}" for m in modules.values() for line, what in sorted(m.private)
    ]


def faust_path(modules: dict[str, Module], start: str) -> str | None:
    """How ``start`` comes to import Faust (its own imports, every app module they import,
    deferred ones included, and the packages those sit in: Python runs them first); None when
    it does not."""
    came: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        found = sorted(FAUST & set(modules[v].packages))
        if found:
            steps = [f"{v} imports {found[0]} (line {modules[v].packages[found[0]]})"]
            while came[v] is not None:
                u = came[v]
                line = modules[u].imports.get(v)
                steps.append(f"{u} -> {v}" + (f" (line {line})" if line else " (its package)"))
                v = u
            return " / ".join(reversed(steps))
        parts = v.split(".")
        for w in [*modules[v].imports, *(".".join(parts[:i]) for i in range(1, len(parts)))]:
            if w in modules and w not in came:
                came[w] = v
                queue.append(w)
    return None


def faust_free_violations(modules: dict[str, Module]) -> list[str]:
    """``path: how it imports Faust`` of each module of :data:`FAUST_FREE` that does."""
    out = []
    for name, mod in sorted(modules.items()):
        if any(mod.path.startswith(f) if f.endswith("/") else mod.path == f for f in FAUST_FREE):
            how = faust_path(modules, name)
            if how is not None:
                out.append(f"{mod.path}: {how}")
    return out


def test_app_has_no_import_cycle():
    modules = scan(ROOT)
    assert "app.loop.durable" in modules["app.agents.event_join"].imports  # sees real imports
    cycles = import_cycles(modules)
    assert cycles == [], "app modules that import each other round:\n" + "\n".join(cycles)


def test_no_app_module_reaches_a_private_name_of_another():
    crossings = private_crossings(scan(ROOT))
    assert crossings == [], (
        "a private name of another module (make it public, or give it "
        "one home):\n" + "\n".join(crossings)
    )


def test_what_runs_without_faust_imports_no_faust():
    for wanted in FAUST_FREE:
        assert (ROOT / wanted).exists(), f"{wanted} (FAUST_FREE) is gone: say where it went"
    modules = scan(ROOT)
    assert faust_path(modules, "app.faust_app") is not None  # the check sees Faust at all
    bad = faust_free_violations(modules)
    assert bad == [], "meant to run without Faust, but imports it:\n" + "\n".join(bad)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_fails_on_a_cycle_of_deferred_and_type_checking_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/loop/__init__.py": "",
            "app/loop/durable.py": "def run():\n    from app.loop import intake\n",
            "app/loop/intake.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from app.loop.durable import Engine\n",
            "app/loop/types.py": "class Engine: ...\n",
        },
    )
    assert import_cycles(scan(root)) == [
        "app.loop.durable (line 2) -> app.loop.intake (line 3) -> app.loop.durable"
    ]
    (root / "app/loop/intake.py").write_text("from app.loop.types import Engine\n")
    assert import_cycles(scan(root)) == []
    # a package importing its own modules is no cycle; a module importing its package back is
    (root / "app/loop/__init__.py").write_text("from app.loop import durable\n")
    assert import_cycles(scan(root)) == []
    (root / "app/loop/types.py").write_text("import app.loop as package\n")
    (root / "app/loop/durable.py").write_text("from app.loop import types\n")
    assert import_cycles(scan(root)) != []
    # Faust's settings name a class by a string: "app.x:Name" is an import
    (root / "app/loop/types.py").write_text("TOPIC = 'app.loop:Topic'\n")
    assert import_cycles(scan(root)) != []


def test_the_check_fails_on_a_private_name_of_another_module(tmp_path):
    root = _tree(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/views.py": "def _ident(url):\n    return url\n\ndef served():\n    return _ident(1)\n",
            "app/timeline.py": "from app.views import served\n",
        },
    )
    assert private_crossings(scan(root)) == []  # its own private name: fine
    (root / "app/timeline.py").write_text("from app.views import _ident\n")
    assert private_crossings(scan(root)) == ["app/timeline.py:1: app.views._ident"]
    (root / "app/timeline.py").write_text(
        "def f():\n    from app import views\n    return views._ident(1)\n"
    )
    assert private_crossings(scan(root)) == ["app/timeline.py:3: app.views._ident"]
    (root / "app/timeline.py").write_text("import app.views\nx = app.views._ident\n")
    assert private_crossings(scan(root)) == ["app/timeline.py:2: app.views._ident"]


def test_the_check_fails_when_a_faust_free_module_reaches_faust(tmp_path):
    root = _tree(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/logic/__init__.py": "",
            "app/logic/rules.py": "def f():\n    from app.kafka import security\n",
            "app/kafka/__init__.py": "",
            "app/kafka/security.py": "import ssl\n",
            "app/inputs/records.py": "",
            "app/state/snapshot_store.py": "",
            "app/batch/state_files.py": "",
        },
    )
    assert faust_free_violations(scan(root)) == []
    # deferred, two modules away
    (root / "app/kafka/security.py").write_text("def f():\n    import faust\n")
    assert faust_free_violations(scan(root)) == [
        "app/kafka/security.py: app.kafka.security imports faust (line 2)",
        "app/logic/rules.py: app.logic.rules -> app.kafka.security (line 2) / "
        "app.kafka.security imports faust (line 2)",
    ]
    # through the package Python runs first
    (root / "app/kafka/security.py").write_text("")
    (root / "app/logic/__init__.py").write_text("from mode import Service\n")
    assert "app.logic imports mode (line 1)" in faust_free_violations(scan(root))[0]


# --- no module over 600 lines ----------------------------------------------------------------

#: the most lines a module of app/ may have: past it, a module holds two concerns (issue AD split
#: the four that had grown so); a module that must grow is split by concern first
MAX_LINES = 600


def too_long(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Module path -> its lines, for each module of ``root``/app over ``limit``."""
    out = {}
    for path in sorted((root / "app").rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out[path.relative_to(root).as_posix()] = lines
    return out


def test_no_app_module_is_over_600_lines():
    assert too_long(ROOT) == {}, "split these by concern (docs/contributing/architecture.md)"


def test_the_check_names_a_module_over_the_bound(tmp_path):
    (tmp_path / "app" / "x").mkdir(parents=True)
    (tmp_path / "app" / "x" / "small.py").write_text("a = 1\n" * MAX_LINES)
    (tmp_path / "app" / "x" / "big.py").write_text("a = 1\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == {"app/x/big.py": MAX_LINES + 1}
