"""The faust-streaming and aiokafka versions the patches of :mod:`app.compat` were tested with.

Each patch replaces or reads a private part of these libraries; a new release can rename it or
change what it does, and the guarantee the patch gives would be void without a word. So the
worker refuses to start with any other version, saying which. ``pyproject.toml`` pins the same
specifiers. To move to a new release: run ``make test`` with it (the broker and fault tiers
reproduce every symptom the patches fix), re-read each patch against the new source, then widen
:data:`TESTED` and the pin together.

To try a release before that (``make compat-check VERSION=…`` does), ``ETJ_UNTESTED_VERSIONS=1``
turns the refusal into a logged warning. Never in production.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import Version

log = logging.getLogger(__name__)

#: distribution -> the versions the patches were tested with (same as pyproject.toml's pins)
TESTED: dict[str, str] = {
    "faust-streaming": "==0.15.3",
    "aiokafka": "==0.14.0",
}


class UntestedVersion(RuntimeError):
    """A faust-streaming or aiokafka outside the range :mod:`app.compat` was tested with."""


def check_versions(
    installed: dict[str, str] | None = None, allow_untested: bool | None = None
) -> None:
    """Raise :class:`UntestedVersion` naming every library outside its tested range.

    ``installed``: distribution -> version, for tests; default: what is installed.
    ``allow_untested``: log a warning instead of raising; default: the setting
    ``ETJ_UNTESTED_VERSIONS`` for what is installed, never for an ``installed`` given.
    """
    problems = []
    for dist, spec in TESTED.items():
        try:
            have = installed[dist] if installed is not None else version(dist)
        except (KeyError, PackageNotFoundError):
            problems.append(f"{dist} is not installed (etj needs {dist}{spec})")
            continue
        if Version(have) not in SpecifierSet(spec):
            problems.append(
                f"{dist} {have} is installed, but etj's patches to it "
                f"(app/compat) were tested with {dist}{spec} only"
            )
    if not problems:
        return
    if allow_untested is None:
        allow_untested = installed is None and _untested_allowed()
    if allow_untested:
        log.warning(
            "ETJ_UNTESTED_VERSIONS is set: starting anyway, although %s", "; ".join(problems)
        )
        return
    raise UntestedVersion(
        "refusing to start: "
        + "; ".join(problems)
        + ". Install the tested versions (pip install -e .), or see "
        "docs/contributing/patches.md to move to a new release."
    )


def _untested_allowed() -> bool:
    from app.settings import Settings  # the setting, read as the worker reads it

    return Settings().untested_versions
