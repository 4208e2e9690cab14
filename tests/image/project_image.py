"""The project's image, built from its Dockerfile, unchanged, as a user builds it.

``docker build --network host --build-arg PYTHON_IMAGE=<base> .``: the only difference from a
user's build is the base (:mod:`tests.image.base_image`); pip reaches the package index from
inside the build through the host's network.

The tag is a digest of what goes in: the Dockerfile, ``.dockerignore`` and the build context it
lets in (``pyproject.toml``, ``README.md``, ``app/``), and the base. A checkout whose app changed
gets a new tag, so two checkouts on one machine (one daemon) never run each other's image;
Docker's layer cache (file contents, not times) makes a build of an unchanged context take
seconds, and one whose ``app/`` alone changed skip nothing but the ``pip install`` layer on.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import time
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from tests.image.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "etj-test"
BUILD_STAGE = "etj-test-build"
#: tags of this repository older than this (and not the current one) are removed
KEEP_OLD_S = 24 * 3600


@dataclass(frozen=True)
class Build:
    """One ``docker build``: the tag, how long it took, how many of its steps were cached."""

    tag: str
    base: str
    seconds: float
    steps: int
    cached_steps: int
    log: str


def context_files(root: Path = ROOT) -> list[Path]:
    """The files ``.dockerignore`` (an allowlist: ``*`` then ``!path``) lets into the build."""
    lines = [
        ln.strip()
        for ln in (root / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    allowed = [ln[1:].rstrip("/") for ln in lines if ln.startswith("!")]
    ignored = [ln.removeprefix("**/") for ln in lines[1:] if not ln.startswith("!")]
    out = []
    for entry in allowed:
        path = root / entry
        for f in sorted([path] if path.is_file() else path.rglob("*")):
            if f.is_file() and not any(
                fnmatch.fnmatch(part, pat) for part in f.parts for pat in ignored
            ):
                out.append(f)
    return out


def tag(base: str, root: Path = ROOT) -> str:
    digest = hashlib.sha256(base.encode())
    for f in [root / "Dockerfile", root / ".dockerignore", *context_files(root)]:
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def build(engine: Engine, base: str, root: Path = ROOT, no_cache: bool = False) -> Build:
    """Build the image; its build stage is tagged too (``etj-test-build:<same digest>``), so
    that stage, Docker's cache of the ``pip install``, is a tag :func:`prune_old` can remove
    rather than an untagged image nothing ever removes."""
    name = tag(base, root)
    common = ["build", "--network", "host", "--build-arg", f"PYTHON_IMAGE={base}"]
    if no_cache:
        common.append("--no-cache")
    began = time.monotonic()
    log = ""
    for args in (
        ["--target", "build", "-t", name.replace(REPOSITORY, BUILD_STAGE, 1)],
        ["-t", name],
    ):
        done = engine.run(*common, *args, str(root), timeout=1200)
        log += done.stdout + done.stderr
        common = [a for a in common if a != "--no-cache"]  # the second reuses the first
    seconds = time.monotonic() - began
    final = log[log.rfind("Step 1/") :]
    steps = len(re.findall(r"^Step \d+/\d+ :", final, re.M))
    return Build(name, base, seconds, steps, final.count("---> Using cache"), log)


def size_bytes(engine: Engine, image: str) -> int:
    return int(engine.run("image", "inspect", "--format", "{{.Size}}", image).stdout)


def prune_old(engine: Engine, keep: str) -> list[str]:
    """Remove this tier's image and build-stage tags older than a day but ``keep``'s (an image
    a container still uses is refused by Docker and stays)."""
    listed = [
        name
        for repo in (REPOSITORY, BUILD_STAGE)
        for name in engine.run(
            "image", "ls", repo, "--format", "{{.Repository}}:{{.Tag}}", check=False
        ).stdout.split()
    ]
    old = []
    for name in listed:
        if name.split(":")[1] == keep.split(":")[1]:
            continue
        created = engine.run(
            "image", "inspect", "--format", "{{.Created}}", name, check=False
        ).stdout.strip()
        if created and _age_s(created) > KEEP_OLD_S:
            old.append(name)
    if old:
        engine.run("rmi", *old, check=False)
    return old


def _age_s(created: str) -> float:
    from datetime import datetime

    stamp = re.sub(r"(\.\d{6})\d*", r"\1", created.replace("Z", "+00:00"))
    return (datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()
