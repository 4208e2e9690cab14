"""The image tier's fixtures: one Docker engine and one built image for the whole tier (package
scope: a daemon started here stops when the tier ends, not after the tiers that follow), an S3
store (moto) for snapshots, and worker containers per test, removed at its end."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Names, S3Broker
from tests.image import base_image, project_image
from tests.image.containers import Container, new_volume, start_container
from tests.image.engine import Engine


@dataclass(frozen=True)
class Image:
    """The image under test and how it was made in this session."""

    tag: str
    base: str
    base_made: bool  # the base was made now (debootstrap), not found on this machine
    build: project_image.Build


@pytest.fixture(scope="package")
def image(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Image:
    base, made = base_image.ensure(engine, tmp_path_factory.mktemp("base"))
    built = project_image.build(engine, base)
    project_image.prune_old(engine, keep=built.tag)
    print(
        f"\nimage {built.tag} on {base}{' (base made now)' if made else ''}: built in "
        f"{built.seconds:.1f} s, {built.cached_steps}/{built.steps} steps cached",
        file=sys.stderr,
    )
    return Image(built.tag, base, made, built)


@pytest.fixture(scope="package")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 with the bucket ``tansu``: its endpoint and credentials
    as the chart's values and Secret give them to a pod."""
    store = S3Broker(tmp_path_factory.mktemp("s3"))
    store.start_storage()
    try:
        yield {
            "endpoint": f"http://127.0.0.1:{store.s3_port}",
            "bucket": "tansu",
            "AWS_ACCESS_KEY_ID": "etj",
            "AWS_SECRET_ACCESS_KEY": "etj",
        }
    finally:
        store.stop()


@pytest.fixture
def snapshot_store(
    s3: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[Names], str]:
    """``url(names)``: a snapshot store of this test's own in the S3 bucket; the test process
    reaches it too (its AWS_* as the pods get them)."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, s3[key])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["endpoint"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return lambda names: f"s3://{s3['bucket']}/{names.prefix}/snapshots"


@pytest.fixture
def containers(
    engine: Engine,
    image: Image,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Container]]:
    """Start worker containers: ``start(names, pod, volume=None, s3=None, web_port=None,
    values=None, **settings)``.

    ``pod`` names the StatefulSet pod played (its DNS name); ``volume`` reuses a volume (a
    restart on the same claim), else a new one is made; ``web_port`` reuses a port (a pod keeps
    its own), else a free one is taken. The test's names and ``settings``
    (``session_timeout_s=4`` -> ``ETJ_SESSION_TIMEOUT_S``) reach the container as chart values,
    ``values`` as other chart values (tests.image.containers.TANSU_VALUES by default).
    Containers and volumes are removed at the end, their logs printed when the test failed.
    """
    started: list[Container] = []
    volumes: list[str] = []

    def start(
        names: Names,
        pod: str,
        volume: str | None = None,
        s3: dict[str, str] | None = None,
        web_port: int | None = None,
        values: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Container:
        if volume is None:
            volume = new_volume(engine, f"{names.prefix}-{pod}-{len(volumes)}")
            volumes.append(volume)
        n = sum(1 for c in started if c.pod == pod)
        c = start_container(
            engine, image.tag, names, pod, tmp_path, volume, s3, n, web_port, values, **settings
        )
        started.append(c)
        return c

    yield start
    rep = getattr(request.node, "rep_call", None)
    for c in started:
        c.remove()
        if rep is not None and rep.failed:
            print(f"\n===== log of container {c.name} (last 6000 chars) =====\n{c.log()[-6000:]}")
    if volumes:
        engine.run("volume", "rm", "-f", *volumes, check=False)
