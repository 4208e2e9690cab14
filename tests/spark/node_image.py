"""The image of a Spark node: Debian bookworm, Java 17, Python 3.11 and Spark, nothing of etj.

Made on the image tier's base (:mod:`tests.image.base_image`: debootstrap, ``docker import``),
plus Debian's ``openjdk-17-jre-headless`` (apt, in the build) and the driver's own ``pyspark``
and ``py4j`` packages, copied from this environment into the node's
``/usr/local/lib/python3.11/dist-packages``: the same Spark version as the driver's, and its
launcher (``bin/spark-class``, the jars) as ``SPARK_HOME``. No registry is reached for Spark, and
no other Python package is installed: a job whose executors need etj or its dependencies must
bring them (``python -m app.batch pack-env``, docs/batch/cluster.md). The build checks both.

The tag is a digest of the recipe (the Dockerfile's text, the base's tag, the pyspark and py4j
versions): made once per machine (~1 min on top of the base), made again only when one of them
changes.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tests.image import base_image
from tests.image.engine import Engine, EngineError

REPOSITORY = "etj-test-spark-node"
SITE = "/usr/local/lib/python3.11/dist-packages"
DISTRIBUTIONS = ("pyspark", "py4j")

DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
RUN apt-get update -q \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      openjdk-17-jre-headless procps \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb
COPY site-packages/ {SITE}/
ENV SPARK_HOME={SITE}/pyspark JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \\
    PYTHONDONTWRITEBYTECODE=1
ENV PATH=$SPARK_HOME/bin:$PATH
# Spark of the driver's version, and nothing of etj nor its dependencies
RUN python3 -c "import pyspark, sys; print('pyspark', pyspark.__version__, sys.version)" \\
 && java -version \\
 && for m in app pyarrow pandas numpy aiokafka faust rocksdict orjson pydantic; do \\
      ! python3 -c "import $m" 2>/dev/null || {{ echo "$m must not be on a node"; exit 1; }}; \\
    done
"""


@dataclass(frozen=True)
class NodeImage:
    tag: str
    base: str
    made: bool  # built now (not found on this machine)
    seconds: float  # of the build (and the base's debootstrap, when made now)


def versions() -> dict[str, str]:
    return {d: metadata.version(d) for d in DISTRIBUTIONS}


def tag(base: str) -> str:
    digest = hashlib.sha256(DOCKERFILE.encode() + base.encode())
    for name, version in sorted(versions().items()):
        digest.update(f"{name}=={version}\0".encode())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def _site_files() -> list[tuple[Path, str]]:
    """(file, path in site-packages) of the driver's pyspark and py4j, byte code left out."""
    out = []
    for name in DISTRIBUTIONS:
        dist = metadata.distribution(name)
        site = Path(dist.locate_file("")).resolve()
        for f in dist.files or []:
            path = Path(dist.locate_file(f)).resolve()
            try:
                inside = path.relative_to(site)
            except ValueError:
                continue  # console scripts (bin/pyspark ...): SPARK_HOME/bin has them
            if "__pycache__" not in inside.parts and path.is_file():
                out.append((path, inside.as_posix()))
    return out


def _context(into: io.RawIOBase | None, files: list[tuple[Path, str]]) -> None:
    with tarfile.open(fileobj=into, mode="w|") as tar:  # a stream: docker reads as it comes
        data = DOCKERFILE.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for path, inside in files:
            tar.add(path, arcname=f"site-packages/{inside}", recursive=False)


def build(engine: Engine, base: str, name: str, timeout_s: float = 1500) -> str:
    """``docker build --network host -`` of :data:`DOCKERFILE` (apt reaches Debian's mirror
    through the host's network); the build's output."""
    proc = subprocess.Popen(
        [
            engine.client,
            "build",
            "--network",
            "host",
            "--build-arg",
            f"BASE={base}",
            "-t",
            name,
            "-",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    out = b""
    try:
        _context(proc.stdin, _site_files())  # type: ignore[arg-type]
        proc.stdin.close()
        out = proc.stdout.read()
        proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise EngineError(f"docker build {name} -> {proc.returncode}:\n{text[-4000:]}")
    return text


def ensure(engine: Engine, workdir: Path) -> NodeImage:
    """The node image of this recipe, built (with its base) if this machine has none."""
    t0 = time.monotonic()
    base, _ = base_image.ensure(engine, workdir / "base")
    name = tag(base)
    if engine.run("image", "inspect", name, check=False).returncode == 0:
        return NodeImage(name, base, False, time.monotonic() - t0)
    build(engine, base, name)
    return NodeImage(name, base, True, time.monotonic() - t0)
