"""Which upstream code each patch replaces, and whether that code is still what it was written
against: an upgrade of faust-streaming or aiokafka names the patches it breaks.

A patch says what it replaces with :func:`replaces`: the upstream target (``module:qualname``,
the module where the target is defined or imported from) and the first 12 hex digits of the
sha256 of the target's source in the release the patch was written against::

    @replaces("aiokafka.consumer.fetcher:FetchResult.getall", "3f2a9c1d0b7e")
    def getall(self, max_records=None): ...

    class EtjConsumer(aiokafka_driver.Consumer):
        @replaces("faust.transport.consumer:Consumer._new_offset", "0b7e3f2a9c1d")
        def _new_offset(self, tp): ...

    @replaces(("faust.tables.recovery:Recovery._slurp_changelogs", "9c1d0b7e3f2a"),
              ("faust.tables.recovery:Recovery._seek_offsets", "d0b7e3f2a9c1"))
    class EtjRecovery(Recovery): ...        # a class that copies several upstream methods

The decorator returns the object unchanged (stack it under ``property``/``ServiceTask`` or over
them, and stack it more than once if you like). In etj it refuses a function made inside another
(``install()``'s closures): that would be registered only once ``install()`` ran.

The hash is of the target's source text as the installed package has it (decorators, comments
and docstring included, dedented, line ends normalised), read from the source file, so a patch
already installed in the process does not hide it. :func:`changed` recomputes every hash: a unit
test (``tests/unit/test_upstream.py``) and ``make compat-check`` fail naming each patch whose
upstream changed or is gone.

Each registered patch's docstring has a fixed form (:func:`parse_doc`; the docs page
``docs/contributing/patches.md`` is generated from it by :mod:`app.docgen.patches_doc`)::

    What the patch does, in a sentence or a paragraph (free text).

    Upstream: what the replaced code does (faust-streaming 0.15.3), one paragraph.
    Symptom: what that did here, one paragraph.
    Test: tests/unit/test_log_gaps.py::test_skipped_ranges (one or more path::function).
    Remove when: the upstream change that makes the patch unneeded.

The command line::

    python -m app.compat.upstream                 # every patch: recorded and current hash; exit 1
                                                  # if one changed (and the code that replaces
                                                  # upstream but registers nothing)
    python -m app.compat.upstream --hash TARGET…  # the current hash of each target, as a
                                                  # decorator line to paste

The registry is filled by importing every module of :mod:`app.compat` (:func:`load`).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "replaces",
    "registry",
    "upstream_source",
    "upstream_hash",
    "changed",
    "Change",
    "Patch",
    "parse_doc",
    "doc_problems",
    "unregistered",
    "load",
    "imported_upstream_names",
    "upstream_module",
]

ROOT = Path(__file__).resolve().parents[2]
#: the package of the patches (this module's), found from here and not imported: it imports the
#: patch modules, which import this one (an import cycle, when this module imported it back)
PACKAGE = __name__.rpartition(".")[0]
PACKAGE_PATH = [str(Path(__file__).resolve().parent)]
#: the packages whose code the patches replace (top-level import names)
UPSTREAM = ("faust", "aiokafka", "mode")
#: the distributions the compat check names in its report
DISTRIBUTIONS = ("faust-streaming", "aiokafka", "mode-streaming")
HASH_LEN = 12
#: the docstring sections of a patch, in this order, each once and not empty
SECTIONS = ("Upstream", "Symptom", "Test", "Remove when")

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_HASH = re.compile(rf"^[0-9a-f]{{{HASH_LEN}}}$")

T = TypeVar("T")


@dataclass(frozen=True)
class Patch:
    """One (patch, upstream target) pair; a patch that replaces several targets has several."""

    obj: Any  #: what was decorated (a function, a property, a ServiceTask, a class), unchanged
    module: str  #: the patch's module (``app.compat.log_gaps``)
    qualname: str  #: its qualified name in that module (``getall``, ``EtjConsumer.ack_range``)
    target: str  #: ``module:qualname`` of the upstream code it replaces or copies
    recorded: str  #: the first 12 hex digits of that code's sha256 when the patch was written

    @property
    def name(self) -> str:
        return f"{self.module}:{self.qualname}"


class Change(NamedTuple):
    """A patch whose upstream is not what it was written against."""

    patch: str  #: ``module:qualname`` of the patch
    target: str  #: the upstream target
    recorded: str  #: the hash in the decorator
    now: str  #: the hash now, or ``missing: <why>`` when the target no longer resolves


_REGISTRY: list[Patch] = []
_IMPORT_ERRORS: dict[str, str] = {}


def _pairs(targets: tuple[Any, ...]) -> list[tuple[str, str]]:
    if len(targets) == 2 and all(isinstance(t, str) for t in targets):
        pairs = [tuple(targets)]
    elif targets and all(isinstance(t, tuple) and len(t) == 2 for t in targets):
        pairs = list(targets)
    else:
        raise TypeError(
            'replaces("module:qualname", "hash") or replaces(("module:qualname", "hash"), ...)'
        )
    for target, recorded in pairs:
        if not isinstance(target, str) or not _TARGET.match(target):
            raise ValueError(f"replaces: {target!r} is not 'upstream.module:Qual.name'")
        if not isinstance(recorded, str) or not _HASH.match(recorded):
            raise ValueError(
                f"replaces({target!r}): {recorded!r} is not {HASH_LEN} lowercase hex "
                f"digits (python -m app.compat.upstream --hash {target})"
            )
    return pairs  # type: ignore[return-value]


def _function_of(obj: Any) -> Any:
    """The function (or class) behind a decorated object: property, ServiceTask, classmethod."""
    for _ in range(8):
        if isinstance(obj, property) and obj.fget is not None:
            obj = obj.fget
        elif isinstance(obj, (classmethod, staticmethod)):
            obj = obj.__func__
        elif (
            not inspect.isclass(obj)
            and not inspect.isroutine(obj)
            and callable(getattr(obj, "fun", None))
        ):
            obj = obj.fun  # mode's ServiceTask and its kind
        else:
            break
    return inspect.unwrap(obj) if inspect.isroutine(obj) else obj


def replaces(*targets: Any) -> Callable[[T], T]:
    """Record that the decorated object replaces (or copies) upstream code; return it unchanged.

    ``replaces("mod:Qual.name", "hash")``, or several pairs: ``replaces(("mod:A.x", "hash"),
    ("mod:A.y", "hash"))``. Usable on module-level functions, on methods of subclasses and on
    classes, stacked if need be.
    """
    pairs = _pairs(targets)

    def decorate(obj: T) -> T:
        fn = _function_of(obj)
        module = getattr(fn, "__module__", None) or "?"
        qualname = getattr(fn, "__qualname__", None) or repr(fn)
        if "<locals>" in qualname and module.startswith("app."):
            # registered only once install() ran: the registry (and the page) would depend on it
            raise TypeError(
                f"replaces: {module}:{qualname} is made inside a function; register "
                "a module-level function (or a method of a module-level class)"
            )
        for target, recorded in pairs:
            patch = Patch(obj, module, qualname, target, recorded)
            _REGISTRY[:] = [
                p
                for p in _REGISTRY  # decorated again (a reload): the newest counts
                if (p.module, p.qualname, p.target) != (module, qualname, target)
            ]
            _REGISTRY.append(patch)
        return obj

    return decorate


def load() -> dict[str, str]:
    """Import every module of :mod:`app.compat` (so their decorators ran); module -> the import
    error of those that do not import (with another release, say)."""
    for info in pkgutil.iter_modules(PACKAGE_PATH, PACKAGE + "."):
        if info.name in sys.modules or info.name in _IMPORT_ERRORS:
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            _IMPORT_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
    return dict(_IMPORT_ERRORS)


def registry() -> list[Patch]:
    """Every registered (patch, target), after :func:`load`."""
    load()
    return list(_REGISTRY)


# -- the upstream source ---------------------------------------------------------------------


def _split(target: str) -> tuple[str, list[str]]:
    if not _TARGET.match(target):
        raise ValueError(f"{target!r} is not 'upstream.module:Qual.name'")
    module, _, qualname = target.partition(":")
    return module, qualname.split(".")


def resolve_owner(target: str) -> tuple[Any, str]:
    """(the module or class that holds the target, the target's own name): importlib and an
    attribute walk. Raises ImportError/AttributeError when the target no longer resolves."""
    module_name, parts = _split(target)
    owner: Any = importlib.import_module(module_name)
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def _statements(body: list[ast.stmt]) -> Any:
    """The statements of a body, looking into ``if``/``try``/``with`` blocks (not into defs)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, block, []) or [])
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body)


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
        return [node.target.id]
    return []


@cache
def _definitions(holder: Any) -> dict[str, str]:
    """name -> its definition's source text, for every name ``holder``'s source (a module's or a
    class's) defines at its top level; {} when there is no source to read."""
    try:
        text = textwrap.dedent(inspect.getsource(holder))
    except (OSError, TypeError):
        return {}
    body = ast.parse(text).body
    if inspect.isclass(holder):
        if not body or not isinstance(body[0], ast.ClassDef):
            return {}
        body = body[0].body
    lines = text.splitlines()
    out = {}
    for node in _statements(body):
        for name in _defined_names(node):  # the last definition wins, as at run time
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            out[name] = "\n".join(lines[first - 1 : node.end_lineno])
    return out


def _holders(owner: Any) -> list[Any]:
    """Where ``owner``'s members are defined: the module, or the class and its bases."""
    if inspect.isclass(owner):
        return [c for c in owner.__mro__ if c.__module__ != "builtins"]
    return [owner]


def _defined_upstream(owner: Any, name: str) -> bool:
    """Does upstream's source define ``name`` in ``owner`` (or a base of it)?"""
    return any(
        name in _definitions(h)
        for h in _holders(owner)
        if upstream_module(h) or inspect.ismodule(h)
    )


def upstream_module(obj: Any) -> bool:
    """Is ``obj`` (a class, a function) defined by one of the packages the patches replace?"""
    return (getattr(obj, "__module__", None) or "").split(".")[0] in UPSTREAM


def upstream_source(target: str) -> str:
    """The source text of ``target`` (``module:qualname``) in the installed packages.

    Read from the source file of the class (or module) that holds it, looking through the class's
    bases for an inherited member, so a patch installed in this process does not hide it; a
    member not found there (re-exported, made at run time) is read from the object itself
    (property, ServiceTask and wrappers unwrapped). Dedented, line ends normalised.
    """
    owner, name = resolve_owner(target)
    text = next((_definitions(h)[name] for h in _holders(owner) if name in _definitions(h)), None)
    if text is None:
        obj = _function_of(getattr(owner, name))
        if not upstream_module(obj):
            raise LookupError(
                f"{target}: no upstream definition found (the object there comes "
                f"from {getattr(obj, '__module__', None)!r})"
            )
        text = inspect.getsource(obj)
    text = textwrap.dedent(text.replace("\r\n", "\n").replace("\r", "\n"))
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


def upstream_hash(target: str) -> str:
    """The first 12 hex digits of the sha256 of :func:`upstream_source`."""
    return hashlib.sha256(upstream_source(target).encode("utf-8")).hexdigest()[:HASH_LEN]


def changed() -> list[Change]:
    """Every patch whose upstream target changed or no longer resolves (after :func:`load`), and
    every module of app.compat that does not import (patch ``app.compat.x``, target ``import``).
    """
    patches = registry()
    out = [
        Change(module, "import", "", f"missing: {error}")
        for module, error in sorted(_IMPORT_ERRORS.items())
    ]
    for patch in patches:
        try:
            now = upstream_hash(patch.target)
        except Exception as exc:
            now = f"missing: {type(exc).__name__}: {exc}"
        if now != patch.recorded:
            out.append(Change(patch.name, patch.target, patch.recorded, now))
    return out


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
    fn = _function_of(obj)
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
    """Code of app.compat that replaces upstream code and is registered with no :func:`replaces`.

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
        if module is None or info.name == __name__:
            continue
        path = Path(module.__file__ or "")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        imported = imported_upstream_names(tree)
        functions = {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        where = f"app/compat/{path.name}"
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
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
                if not _is_method_like(value) or not any(attr in _definitions(b) for b in bases):
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
                base = next(b for b in bases if attr in _definitions(b))
                out.append(
                    f"{where} {cls.__qualname__}.{attr} overrides "
                    f"{base.__module__}:{base.__qualname__}.{attr}: not registered"
                )
    return out


# -- the command line ------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """The installed versions of the upstream distributions."""
    out = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


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
    for module, error in sorted(_IMPORT_ERRORS.items()):
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
    # the registry lives in app.compat.upstream, which the patches import: not in __main__
    from app.compat.upstream import main as _main

    sys.exit(_main(sys.argv[1:]))
