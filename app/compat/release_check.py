"""``make compat-check VERSION=…``: try another faust-streaming or aiokafka release in one command.

``VERSION`` is a pip requirement list, e.g. ``"aiokafka==0.13.0"`` or
``"faust-streaming==0.15.3 aiokafka==0.12.0"``. In a scratch virtualenv (``.venv-compat``, kept
between runs, ignored by git) this installs ``pyproject.toml``'s dependencies and its ``test``
and ``batch`` extras (what the two tiers import), the named distributions' pins replaced by the
ones given (pip cannot override an exact pin of the project it installs, so the project itself
goes in with ``--no-deps``), then runs, with ``ETJ_UNTESTED_VERSIONS=1`` (the worker's refusal
of untested versions becomes a warning):

1. ``python -m app.compat.upstream_audit``: every registered patch with the hash of the upstream
   source it was written against and the hash now (:mod:`app.compat.upstream_audit`); fails
   naming each patch whose upstream changed or is gone, and each module of app.compat that no
   longer imports (each imported on its own, not through ``app/compat/__init__.py``, so one does
   not hide the rest);
2. the unit and agent tiers, ``pytest tests/unit tests/agent -m "unit or agent"``.

It exits 1 when either failed (both always run), 2 when the release does not install.
``python -m app.compat.release_check [--venv DIR] [--no-tiers] 'REQUIREMENT …'``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
TIERS = "unit or agent"
#: what the unit and agent tiers import (the batch extra: pyarrow, for the archive's tests)
EXTRAS = ("test", "batch")
#: ``python -m app.compat.upstream_audit``, but without running ``app/compat/__init__.py`` first
#: (it imports every patch module, so one that no longer imports would hide all the others):
#: each module is imported on its own, and one that fails is reported by name with its error
HASH_CHECK = """\
import sys, types, pathlib, app
package = types.ModuleType("app.compat")
package.__path__ = [str(pathlib.Path(app.__file__).parent / "compat")]
sys.modules["app.compat"] = package
from app.compat.upstream_audit import main
sys.exit(main([]))
"""


def requirements(
    overrides: list[str],
    pyproject: Path = ROOT / "pyproject.toml",
    extras: tuple[str, ...] = EXTRAS,
) -> list[str]:
    """The project's dependencies and ``extras``, each named in ``overrides`` replaced by it."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    wanted = {canonicalize_name(Requirement(r).name): r for r in overrides}
    listed = list(project["dependencies"])
    for extra in extras:
        listed += project.get("optional-dependencies", {}).get(extra, [])
    kept = [r for r in listed if canonicalize_name(Requirement(r).name) not in wanted]
    return kept + list(wanted.values())


def _run(cmd: list[str], env: dict[str, str] | None = None, shown: str | None = None) -> int:
    print("+ " + (shown or " ".join(cmd)), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m app.compat.release_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "version", nargs="+", help='pip requirements, e.g. "aiokafka==0.13.0" (one or several)'
    )
    parser.add_argument("--venv", default=".venv-compat", help="the scratch virtualenv")
    parser.add_argument(
        "--no-tiers", action="store_true", help="only install and check the upstream hashes"
    )
    args = parser.parse_args(argv)
    overrides = [r for arg in args.version for r in arg.split()]
    try:
        reqs = requirements(overrides)
    except Exception as exc:
        print(f"compat-check: {exc}", file=sys.stderr)
        return 2
    venv = (ROOT / args.venv).resolve()
    python = str(venv / "bin" / "python")
    if not (venv / "bin" / "python").exists() and _run([sys.executable, "-m", "venv", str(venv)]):
        return 2
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if _run(pip + reqs) or _run(pip + ["--no-deps", "-e", "."]):
        print(
            f"compat-check: {' '.join(overrides)} does not install with etj's other pins",
            file=sys.stderr,
        )
        return 2
    env = {**os.environ, "ETJ_UNTESTED_VERSIONS": "1"}
    env.pop("PYTHONPATH", None)  # the scratch venv's packages, not another's
    hashes = _run([python, "-c", HASH_CHECK], env, f"{python} -m app.compat.upstream_audit")
    tiers = (
        None
        if args.no_tiers
        else _run(
            [
                python,
                "-m",
                "pytest",
                "tests/unit",
                "tests/agent",
                "-m",
                TIERS,
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            env,
        )
    )
    print(
        f"\ncompat-check {' '.join(overrides)}: upstream of the patches "
        f"{'unchanged' if hashes == 0 else 'CHANGED or BROKEN (see above)'}; unit and agent tiers "
        f"{'not run' if tiers is None else 'passed' if tiers == 0 else 'FAILED'}"
    )
    return 1 if hashes or tiers else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
