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

This module is the registry, what a worker imports at start (every patch module imports
:func:`replaces`); the upgrade audit (each patch's docstring form, the code that replaces
upstream but registers nothing, ``python -m app.compat.upstream_audit``) is
:mod:`app.compat.upstream_audit`. The registry is filled by importing every module of
:mod:`app.compat` (:func:`load`).
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
    "versions",
    "Change",
    "Patch",
    "load",
    "resolve_owner",
    "function_of",
    "definitions",
    "holders",
    "upstream_module",
]

#: the package of the patches (this module's), found from here and not imported: it imports the
#: patch modules, which import this one (an import cycle, when this module imported it back)
PACKAGE = __name__.rpartition(".")[0]
PACKAGE_PATH = [str(Path(__file__).resolve().parent)]
#: the packages whose code the patches replace (top-level import names)
UPSTREAM = ("faust", "aiokafka", "mode")
#: the distributions the compat check names in its report
DISTRIBUTIONS = ("faust-streaming", "aiokafka", "mode-streaming")
HASH_LEN = 12

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
                f"digits (python -m app.compat.upstream_audit --hash {target})"
            )
    return pairs


def function_of(obj: Any) -> Any:
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
        fn = function_of(obj)
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
def definitions(holder: Any) -> dict[str, str]:
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


def holders(owner: Any) -> list[Any]:
    """Where ``owner``'s members are defined: the module, or the class and its bases."""
    if inspect.isclass(owner):
        return [c for c in owner.__mro__ if c.__module__ != "builtins"]
    return [owner]


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
    text = next((definitions(h)[name] for h in holders(owner) if name in definitions(h)), None)
    if text is None:
        obj = function_of(getattr(owner, name))
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


# -- the installed releases ------------------------------------------------------------------


def versions() -> dict[str, str]:
    """The installed versions of the upstream distributions."""
    out = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out
