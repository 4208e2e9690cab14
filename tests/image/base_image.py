"""The base image the tier builds on, made from Debian's own packages.

Why: the Dockerfile's default base, ``python:3.11-slim-bookworm``, comes from a container
registry, and none is reachable here. A base with the same contents that matter (Debian
bookworm, its Python 3.11, ``venv`` and ``pip``, the CA certificates) is made with debootstrap
and ``docker import``ed; the project's Dockerfile then builds on it unchanged
(``--build-arg PYTHON_IMAGE=...``). What differs from the official image: Python is Debian's
(3.11.2, ``/usr/bin``) rather than a source build in ``/usr/local``, and the machine's CA bundle
replaces Debian's, because this machine's HTTPS traffic (pip's, in the build) goes through it.

The image is tagged with a digest of its recipe and of that CA bundle: made once per machine
(~1 min), and made again only when one of them changes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.image.engine import Engine, EngineError

REPOSITORY = "etj-test-base"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: everything that goes into the base; a change here is a new tag
RECIPE = {
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3", "python3-venv", "python3-pip", "ca-certificates"],
    "mirror": "http://deb.debian.org/debian",
    # the official python images link `python`; apt's caches and lists are left out as theirs
    "after": [
        "ln -s python3 /usr/bin/python",
        "machine CA bundle",
        "rm /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/lib/apt/lists/*",
    ],
}


def tag() -> str:
    digest = hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode())
    digest.update(CA_BUNDLE.read_bytes())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def debootstrap(rootfs: Path) -> None:
    cmd = [
        "debootstrap",
        f"--variant={RECIPE['variant']}",
        f"--include={','.join(RECIPE['include'])}",
        RECIPE["suite"],
        str(rootfs),
        RECIPE["mirror"],
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        log = rootfs / "debootstrap" / "debootstrap.log"
        raise EngineError(
            f"{' '.join(cmd)} -> {done.returncode}:\n{done.stderr[-3000:]}\n"
            + (log.read_text(errors="replace")[-3000:] if log.exists() else "")
        )
    (rootfs / "usr/bin/python").symlink_to("python3")
    shutil.copyfile(CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
    for pattern in ("var/cache/apt/*.bin", "var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
        for path in rootfs.glob(pattern):
            if path.is_file():
                path.unlink()


def ensure(engine: Engine, workdir: Path) -> tuple[str, bool]:
    """The base image's tag, made if this machine has none of this recipe; (tag, made now)."""
    name = tag()
    if engine.run("image", "inspect", name, check=False).returncode == 0:
        return name, False
    workdir.mkdir(parents=True, exist_ok=True)
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=workdir))
    try:
        debootstrap(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        try:
            done = subprocess.run(
                [engine.client, "import", "-", name],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            tar.stdout.close()
            tar.wait()
        if done.returncode != 0 or tar.returncode != 0:
            raise EngineError(
                f"docker import {name} -> {done.returncode} (tar "
                f"{tar.returncode}):\n{done.stderr[-3000:]}"
            )
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return name, True
