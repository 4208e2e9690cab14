"""``python -m app.batch pack-env``: what the executors need of etj, packed to travel with a job.

On a cluster, Spark runs parts of some jobs in a Python on the executors: ``bootstrap``
(``applyInArrow``/``applyInPandas`` and an Arrow UDF: :mod:`app.batch.state_files` imports
aiokafka, rocksdict, orjson and, through the settings' Kafka security, Faust), and a spec that
copies a float into its events (a small UDF). The executors' own Python has Spark's ``pyspark``
and nothing else of etj. This command packs:

- ``site-packages/``: the ``app`` package as this driver runs it, and every distribution it
  needs on an executor, copied file by file from this driver's environment (each one's
  ``RECORD``: the same versions and builds, nothing downloaded): etj's dependencies and the
  ``batch`` extra's pyarrow and pandas, each with its own dependencies, but not ``pyspark`` nor
  ``py4j`` (the executors' Spark has its own, of the driver's version);
- ``bin/python``: a shell script that starts the node's ``python3.X`` (the driver's minor
  version, as PySpark requires) with ``site-packages/`` first on its path;
- ``etj-env.json`` (the first member): the Python version, the platform and the distributions
  it holds, and a digest of the files it was made from: run again with nothing changed, the
  command keeps the archive as it is (under a second instead of ~12 s).

Sent with ``--archives etj-executor-env.tar.gz#etj-env --conf
spark.pyspark.python=./etj-env/bin/python``: Spark unpacks it into each executor's working
folder (docs/batch/cluster.md). It holds compiled modules (rocksdict, orjson, pyarrow ...) built
for this machine: executors need the same CPU architecture and operating system (Linux, a glibc
at least as new as the wheels need) and a Python of the same minor version. For other executors,
run the same command on a machine like them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import sysconfig
import tarfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TypedDict, cast

from packaging.requirements import Requirement

__all__ = ["DEFAULT_OUT", "Packed", "executor_distributions", "pack"]

#: where ``pack-env`` writes by default (``build/`` is not committed)
DEFAULT_OUT = "build/etj-executor-env.tar.gz"
#: what the cluster's Spark brings itself (of the driver's version: PySpark checks it)
PROVIDED = {"pyspark", "py4j"}
#: the extras whose packages executors import (``batch``: pyarrow, pandas; minus PROVIDED)
EXTRAS = ("batch",)
#: the name the archive is unpacked under in the docs' ``--archives PATH#etj-env``
ALIAS = "etj-env"

#: the executors' environment variable naming another interpreter than ``python3.X``
PYTHON_VARIABLE = "ETJ_EXECUTOR_PYTHON"
LAUNCHER = """#!/bin/sh
# etj's executor environment (python -m app.batch pack-env): the node's Python {major}.{minor}
# with this archive's packages first on its path. {variable}: another interpreter.
here=$(cd "$(dirname "$0")/.." && pwd)
PYTHONPATH="$here/site-packages${{PYTHONPATH:+:$PYTHONPATH}}"
export PYTHONPATH
exec "${{{variable}:-python{major}.{minor}}}" "$@"
"""


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def executor_distributions(
    root: str = "etj",
    extras: Iterable[str] = EXTRAS,
) -> list[metadata.Distribution]:
    """The installed distributions ``root`` (with ``extras``) needs, transitively, less
    :data:`PROVIDED` and ``root`` itself; sorted by name."""
    seen: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, tuple[str, ...]]] = [(root, tuple(extras))]
    while todo:
        name, wanted = todo.pop()
        dist = metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in ("", *wanted)
            ):
                continue
            key = _name(req.name)
            if key in PROVIDED or key in seen:
                continue
            try:
                seen[key] = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                raise SystemExit(
                    f"pack-env: {req.name} (needed by {name}) is not installed "
                    f"here; install etj with the batch extra first"
                ) from None
            todo.append((req.name, tuple(req.extras)))
    return [seen[k] for k in sorted(seen)]


def _located(dist: metadata.Distribution, f: str | os.PathLike[str]) -> Path:
    """``dist.locate_file(f)`` as a Path (typeshed says ``SimplePath``; an installed
    distribution's, a ``PathDistribution``, answers a ``pathlib.Path``)."""
    return Path(cast("os.PathLike[str]", dist.locate_file(f)))


def _files(dist: metadata.Distribution, site: Path) -> Iterator[tuple[Path, str]]:
    """(file on disk, path inside site-packages) of ``dist``'s installed files, less byte
    code and what lives outside site-packages (its console scripts)."""
    for f in dist.files or []:
        path = _located(dist, f).resolve()
        try:
            inside = path.relative_to(site)
        except ValueError:
            continue
        if "__pycache__" in inside.parts or not path.is_file():
            continue
        yield path, inside.as_posix()


def _project_files() -> Iterator[tuple[Path, str]]:
    """The ``app`` package this driver imports (a checkout or an installed copy)."""
    import app

    package = Path(app.__file__).resolve().parent
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path, "app/" + path.relative_to(package).as_posix()


@dataclass(frozen=True)
class Packed:
    """What :func:`pack` wrote (or found up to date: ``fresh`` False)."""

    path: Path
    distributions: list[str]  # name==version
    files: int
    unpacked_bytes: int
    packed_bytes: int
    seconds: float
    fresh: bool = True


#: the archive's first member: what it holds, and the digest of what it was made from
MANIFEST = "etj-env.json"


class Manifest(TypedDict):
    """The archive's manifest (:data:`MANIFEST`)."""

    python: str  # major.minor
    platform: str  # sysconfig's
    distributions: list[str]  # name==version
    inputs: str  # sha256 of the launcher and of every member's name, size and time


def _members() -> tuple[list[metadata.Distribution], dict[str, Path]]:
    dists = executor_distributions()
    members: dict[str, Path] = {}
    for dist in dists:
        site = _located(dist, "").resolve()
        for path, inside in _files(dist, site):
            members.setdefault(inside, path)
    for path, inside in _project_files():
        members[inside] = path
    return dists, members


def _manifest(
    dists: list[metadata.Distribution], members: dict[str, Path], launcher: bytes
) -> Manifest:
    digest = hashlib.sha256(launcher)
    for inside in sorted(members):
        st = members[inside].stat()
        digest.update(f"{inside}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "platform": sysconfig.get_platform(),
        "distributions": [f"{d.metadata['Name']}=={d.version}" for d in dists],
        "inputs": digest.hexdigest(),
    }


def read_manifest(path: str | Path) -> dict[str, object] | None:
    """The manifest of an archive :func:`pack` wrote (None: no such file, or not one)."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                return None
            f = tar.extractfile(first)
            return None if f is None else json.loads(f.read())
    except (OSError, tarfile.TarError, ValueError):
        return None


def pack(out: str | Path = DEFAULT_OUT, compresslevel: int = 6, force: bool = False) -> Packed:
    """Write the archive (module docstring) to ``out`` (``.tar.gz``), atomically; one whose
    manifest says it was made from the same files (names, sizes, times) is kept as it is,
    unless ``force``."""
    t0 = time.monotonic()
    out = Path(out)
    dists, members = _members()
    launcher = LAUNCHER.format(
        major=sys.version_info[0], minor=sys.version_info[1], variable=PYTHON_VARIABLE
    ).encode()
    manifest = _manifest(dists, members, launcher)
    size = sum(p.stat().st_size for p in members.values())
    if not force and out.exists() and read_manifest(out) == manifest:
        return Packed(
            out,
            manifest["distributions"],
            len(members) + 2,
            size,
            out.stat().st_size,
            time.monotonic() - t0,
            fresh=False,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.part")  # two packers at once: each its own
    now = int(time.time())
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=compresslevel) as tar:
            for name, data, mode in (
                (MANIFEST, json.dumps(manifest, indent=1).encode(), 0o644),
                ("bin/python", launcher, 0o755),
            ):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode, now
                tar.addfile(info, io.BytesIO(data))
            for inside in sorted(members):
                tar.add(members[inside], arcname=f"site-packages/{inside}", recursive=False)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return Packed(
        out,
        manifest["distributions"],
        len(members) + 2,
        size,
        out.stat().st_size,
        time.monotonic() - t0,
    )


def main(out: str, compresslevel: int = 6, force: bool = False) -> int:
    done = pack(out, compresslevel, force)
    what = "written" if done.fresh else "up to date"
    print(
        f"pack-env: {done.path} {what} ({done.packed_bytes / 1e6:.1f} MB, "
        f"{done.unpacked_bytes / 1e6:.1f} MB unpacked, {done.files:,} files, "
        f"{len(done.distributions)} distributions, Python "
        f"{sys.version_info[0]}.{sys.version_info[1]}) in {done.seconds:.1f} s",
        flush=True,
    )
    print(
        f"send it with a job: --archives {done.path}#{ALIAS} "
        f"--conf spark.pyspark.python=./{ALIAS}/bin/python",
        flush=True,
    )
    return 0
