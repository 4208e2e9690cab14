"""The upgrade audit of the patches (:mod:`app.compat.upstream` is their registry): each
registered patch's docstring in its form, the tests it names there, and the code of
:mod:`app.compat` that replaces upstream code but registers nothing; with the command line
``make compat-check`` runs. A worker never imports it.

Each registered patch's docstring has a fixed form (:func:`parse_doc`; the docs page
``docs/contributing/patches.md`` is generated from it by :mod:`app.docgen.patches_doc`)::

    What the patch does, in a sentence or a paragraph (free text).

    Upstream: what the replaced code does (faust-streaming 0.15.3), one paragraph.
    Symptom: what that did here, one paragraph.
    Test: tests/unit/test_log_gaps.py::test_skipped_ranges (one or more path::function).
    Remove when: the upstream change that makes the patch unneeded.

The command line::

    python -m app.compat.upstream_audit                 # every patch: recorded and current
                                                        # hash; exit 1 if one changed (and the
                                                        # code that replaces upstream but
                                                        # registers nothing)
    python -m app.compat.upstream_audit --hash TARGET…  # the current hash of each target, as
                                                        # a decorator line to paste

The registry is filled by importing every module of :mod:`app.compat`
(:func:`app.compat.upstream.load`).
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.compat import upstream
from app.compat.upstream import (
    PACKAGE,
    PACKAGE_PATH,
    UPSTREAM,
    Patch,
    changed,
    definitions,
    function_of,
    holders,
    load,
    registry,
    resolve_owner,
    upstream_hash,
    upstream_module,
    versions,
)

__all__ = [
    "SECTIONS",
    "PatchDoc",
    "parse_doc",
    "doc_of",
    "doc_problems",
    "missing_tests",
    "patch_objects",
    "unregistered",
    "imported_upstream_names",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]
#: the docstring sections of a patch, in this order, each once and not empty
SECTIONS = ("Upstream", "Symptom", "Test", "Remove when")


def _defined_upstream(owner: Any, name: str) -> bool:
    """Does upstream's source define ``name`` in ``owner`` (or a base of it)?"""
    return any(
        name in definitions(h) for h in holders(owner) if upstream_module(h) or inspect.ismodule(h)
    )


# -- the docstring form ----------------------------------------------------------------------

_HEADER = re.compile(r"^(" + "|".join(SECTIONS) + r"):(.*)$")
#: a test a ``Test:`` section names: a file of the repository, ``::``, a function (``Class::f``)
TEST_REF = re.compile(r"(?<![\w/.-])([\w./-]+\.py)::([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)")


@dataclass(frozen=True)
class PatchDoc:
    """A patch's docstring: the free text, and the four sections (missing ones absent)."""

    text: str
    sections: dict[str, str]
    problems: tuple[str, ...]  #: what breaks the form (missing, empty, twice, out of order)

    @property
    def tests(self) -> list[tuple[str, str]]:
        """(file, function) of each test the ``Test:`` section names."""
        return TEST_REF.findall(self.sections.get("Test", ""))


def parse_doc(doc: str | None) -> PatchDoc:
    """Split a patch's docstring into its free text and the sections ``Upstream:``,
    ``Symptom:``, ``Test:``, ``Remove when:``.

    A section starts with its name and a colon at the start of a line and runs to the next
    section or the next blank line (one paragraph); every other line is free text. Each of the
    four must be there once, in that order, not empty; ``Test:`` must name at least one test as
    ``path/to/test_file.py::test_function``.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    text: list[str] = []
    sections: dict[str, list[str]] = {}
    order: list[str] = []
    problems: list[str] = []
    current: str | None = None
    for line in lines:
        header = _HEADER.match(line)
        if header:
            current = header.group(1)
            if current in sections:
                problems.append(f"'{current}:' twice")
            order.append(current)
            sections[current] = [header.group(2).strip()]
        elif not line.strip():
            current = None
            text.append("")
        elif current is not None:
            sections[current].append(line.strip())
        else:
            text.append(line)
    joined = {name: " ".join(part for part in parts if part) for name, parts in sections.items()}
    for name in SECTIONS:
        if name not in joined:
            problems.append(f"no '{name}:' section")
        elif not joined[name]:
            problems.append(f"'{name}:' is empty")
    seen = list(dict.fromkeys(order))
    if not problems and seen != list(SECTIONS):
        problems.append(
            f"sections out of order ({', '.join(seen)}; the form: {', '.join(SECTIONS)})"
        )
    if joined.get("Test") and not TEST_REF.search(joined["Test"]):
        problems.append("'Test:' names no test as path/to/test_file.py::test_function")
    free = re.sub(r"\n{3,}", "\n\n", "\n".join(text)).strip()
    return PatchDoc(free, joined, tuple(problems))


def doc_of(obj: Any) -> str | None:
    """A patch's own docstring (never one inherited from the upstream method it overrides)."""
    fn = function_of(obj)
    return fn.__dict__.get("__doc__") if inspect.isclass(fn) else getattr(fn, "__doc__", None)


def missing_tests(parsed: PatchDoc, root: Path = ROOT) -> list[str]:
    """The tests ``Test:`` names that are not there: no such file, or no such function in it."""
    out = []
    for path, qual in parsed.tests:
        file = root / path
        func = qual.split("::")[-1]
        if not file.is_file():
            out.append(f"{path}: no such file")
        elif not re.search(rf"\bdef {re.escape(func)}\(", file.read_text(encoding="utf-8")):
            out.append(f"{path}::{qual}: no function {func} in that file")
    return out


def doc_problems(obj: Any, root: Path = ROOT) -> list[str]:
    """What is wrong with a patch's docstring: its form, and the tests it names."""
    parsed = parse_doc(doc_of(obj))
    return list(parsed.problems) + missing_tests(parsed, root)


def patch_objects(patches: list[Patch] | None = None) -> dict[str, Any]:
    """``module:qualname`` -> the patch object, once each, in registration order."""
    return {p.name: p.obj for p in (registry() if patches is None else patches)}


# -- what replaces upstream code but is not registered ---------------------------------------


def imported_upstream_names(tree: ast.Module) -> set[str]:
    """Names a module binds to something imported from faust, aiokafka or mode (what an
    assignment onto such a name would patch)."""
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] in UPSTREAM
            and not node.level
        ):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] in UPSTREAM
            }
    return names


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _same_place(a: tuple[Any, str], b: tuple[Any, str]) -> bool:
    (owner_a, name_a), (owner_b, name_b) = a, b
    if name_a != name_b:
        return False
    if owner_a is owner_b:
        return True
    return (
        inspect.isclass(owner_a)
        and inspect.isclass(owner_b)
        and (owner_b in owner_a.__mro__ or owner_a in owner_b.__mro__)
    )


def _is_method_like(value: Any) -> bool:
    return (
        inspect.isfunction(value)
        or isinstance(value, (property, classmethod, staticmethod))
        or (not inspect.isclass(value) and callable(getattr(value, "fun", None)))
    )


def unregistered(exempt: dict[str, str] | None = None) -> list[str]:
    """Code of app.compat that replaces upstream code and is registered with no
    :func:`~app.compat.upstream.replaces`.

    - an assignment ``X.attr = value`` (anywhere in a module of app.compat) where ``X`` is, or is
      reached from, a name imported from faust, aiokafka or mode and is an upstream class or
      module: ``X.attr`` must be the target of a registered patch, and when ``value`` is (or
      wraps, as ``ServiceTask(f)``, ``property(f)``) a module-level function, that function
      must be registered;
    - a method of a class of app.compat that subclasses an upstream class and overrides an
      upstream method of the same name: the method must be registered, or its class with that
      method among its targets.

    ``exempt``: ``module:qualname`` of code that is not a patch -> why. Returns one line each.
    """
    patches = registry()
    exempt = exempt or {}

    places = []
    for patch in patches:
        try:
            places.append((patch, resolve_owner(patch.target)))
        except Exception:
            continue
    by_name = {p.name for p in patches}
    out: list[str] = []
    for info in pkgutil.iter_modules(PACKAGE_PATH, PACKAGE + "."):
        module = sys.modules.get(info.name)
        if module is None or info.name in (__name__, upstream.__name__):
            continue
        path = Path(module.__file__ or "")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        imported = imported_upstream_names(tree)
        functions = {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        where = f"app/compat/{path.name}"
        for node in ast.walk(tree):
            targets: list[ast.expr]
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            for t in targets:
                chain = _chain(t) if isinstance(t, ast.Attribute) else None
                if not chain or chain[0] not in imported:
                    continue
                try:
                    owner: Any = module
                    for part in chain[:-1]:
                        owner = getattr(owner, part)
                except AttributeError:
                    continue
                if not (
                    (inspect.isclass(owner) or inspect.ismodule(owner))
                    and (
                        getattr(owner, "__name__" if inspect.ismodule(owner) else "__module__", "")
                        or ""
                    ).split(".")[0]
                    in UPSTREAM
                ):
                    continue
                if not _defined_upstream(owner, chain[-1]):
                    continue  # an attribute of etj's own, added: nothing upstream to replace
                place = (owner, chain[-1])
                label = f"{where}:{node.lineno} {'.'.join(chain)} = …"
                if not any(_same_place(place, p) for _, p in places):
                    out.append(f"{label}: no patch registers a target {'.'.join(chain[-2:])}")
                    continue
                value = getattr(node, "value", None)
                if isinstance(value, ast.Call) and value.args:
                    value = value.args[0]  # ServiceTask(f), property(f)
                if isinstance(value, ast.Name) and value.id in functions:
                    name = f"{info.name}:{value.id}"
                    if name not in by_name and name not in exempt:
                        out.append(f"{label}: {value.id} is not registered")
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != info.name:
                continue
            bases = [b for b in cls.__mro__[1:] if upstream_module(b)]
            if not bases:
                continue
            class_targets = {
                p.target.rpartition(".")[2]
                for p in patches
                if p.module == info.name and p.qualname == cls.__qualname__
            }
            for attr, value in vars(cls).items():
                if not _is_method_like(value) or not any(attr in definitions(b) for b in bases):
                    continue
                name = f"{info.name}:{cls.__qualname__}.{attr}"
                if name in by_name or attr in class_targets or name in exempt:
                    continue
                wrapped = getattr(value, "fun", None) or getattr(value, "fget", None)
                if (
                    wrapped is not None
                    and getattr(wrapped, "__module__", None) == info.name
                    and f"{info.name}:{wrapped.__qualname__}" in by_name
                ):
                    continue  # ServiceTask(f) / property(f) of a registered module function
                base = next(b for b in bases if attr in definitions(b))
                out.append(
                    f"{where} {cls.__qualname__}.{attr} overrides "
                    f"{base.__module__}:{base.__qualname__}.{attr}: not registered"
                )
    return out


# -- the command line ------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if argv[:1] == ["--hash"]:
        status = 0
        for target in argv[1:]:
            try:
                print(f'@replaces("{target}", "{upstream_hash(target)}")')
            except Exception as exc:
                print(f"{target}: missing: {type(exc).__name__}: {exc}", file=sys.stderr)
                status = 1
        return status
    if argv:
        print(
            __doc__.split("The command line::", 1)[1].split("The registry", 1)[0].rstrip(),
            file=sys.stderr,
        )
        return 2
    print("installed: " + ", ".join(f"{d} {v}" for d, v in versions().items()))
    bad = {(c.patch, c.target): c for c in changed()}
    for module, error in sorted(load().items()):
        print(f"BROKEN   {module} does not import: {error}")
    patches = registry()
    for patch in patches:
        change = bad.get((patch.name, patch.target))
        state = "CHANGED " if change else "ok      "
        now = change.now if change else patch.recorded
        print(
            f"{state} {patch.name}  replaces {patch.target}  recorded {patch.recorded}  now {now}"
        )
    loose = unregistered()
    if loose:
        print(
            f"\n{len(loose)} places replace upstream code without @replaces "
            "(their upstream is not checked):"
        )
        for line in loose:
            print("  " + line)
    print(f"\n{len(patches)} registered, {len(bad)} changed or missing")
    if bad:
        print(
            "changed: "
            + ", ".join(sorted({c.patch for c in bad.values()}))
            + "\nre-read each against the new source (docs/contributing/patches.md)"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    # the audit's functions from the module itself, not from a second copy of it in __main__
    from app.compat.upstream_audit import main as _main

    sys.exit(_main(sys.argv[1:]))
