"""Debian packages a test tier needs and a fresh CI machine lacks (docker.io, debootstrap,
postgresql): ``apt-get install``, once, with a package-list update only when the install fails.

Why one home: the image tier and the PostgreSQL sink's tests install on two xdist workers that
may run at the same time on a fresh machine; dpkg takes one lock, so each ``apt-get`` waits for
it (``DPkg::Lock::Timeout``) instead of failing at once with "Could not get lock".
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["AptError", "install"]

#: how long an apt-get waits for another one's dpkg lock
LOCK_WAIT_S = 600
_OPTS = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}", "-q"]


class AptError(RuntimeError):
    """apt-get could not install the packages; the message carries its own words."""


def install(packages: list[str], *extra: str) -> None:
    """``apt-get install -y`` the packages (``extra``: more apt-get options)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", *_OPTS, "install", "-y", *extra, *packages]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900 + LOCK_WAIT_S)
    if done.returncode != 0:  # an old package list: update once, then try again
        subprocess.run(
            ["apt-get", *_OPTS, "update"], env=env, capture_output=True, timeout=600 + LOCK_WAIT_S
        )
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=900 + LOCK_WAIT_S
        )
    if done.returncode != 0:
        raise AptError(
            f"`{' '.join(cmd)}` failed ({done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
