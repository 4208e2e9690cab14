"""The image as the project's Dockerfile builds it: what it weighs, that its native parts load
in the slim base as its unprivileged user on a read-only root, and that it runs what the chart's
StatefulSet runs (docs/operating/image.md).
"""

from __future__ import annotations

import json
import sys

from app.settings import Settings
from tests.image.containers import new_volume
from tests.image.pod import drift, image_config, pod_spec
from tests.image.project_image import size_bytes

MB = 1_000_000
#: the goal: the image weighs at most this over its base
OVER_BASE_MAX = 250 * MB

#: run inside the image: the largest parts of the venv, in bytes
VENV_SIZES = r"""
import json, os, sys
site = [p for p in sys.path if p.endswith("site-packages")][0]
def size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
               if not os.path.islink(os.path.join(d, f)))
parts = {name: size(os.path.join(site, name)) for name in os.listdir(site)}
print(json.dumps({"venv": size(sys.prefix), "parts": parts}))
"""

#: run inside the image, as its user: RocksDB writes and reads on the datadir volume, uvloop
#: runs a loop, the app imports, and the root filesystem refuses a write
NATIVE_PARTS = r"""
import errno, json, os
import rocksdict, uvloop, orjson
db = rocksdict.Rdict(os.environ["ETJ_DATADIR"] + "/probe.db")
db[b"k"] = b"v"
assert db[b"k"] == b"v"
db.close()
async def answer():
    return 42
loop = uvloop.new_event_loop()
assert loop.run_until_complete(answer()) == 42
import app.main  # noqa: F401  (the whole app: agents, tables, views)
try:
    open("/opt/venv/written", "w")
    root_ro = False
except OSError as exc:
    root_ro = exc.errno == errno.EROFS
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "root_read_only": root_ro,
                  "datadir": sorted(os.listdir(os.environ["ETJ_DATADIR"])),
                  "orjson": orjson.dumps({"a": 1}).decode()}))
"""


def test_the_image_weighs_at_most_250_mb_over_its_base(engine, image):
    size, base = size_bytes(engine, image.tag), size_bytes(engine, image.base)
    sizes = json.loads(
        engine.run("run", "--rm", "--entrypoint", "python", image.tag, "-c", VENV_SIZES).stdout
    )
    top = sorted(sizes["parts"].items(), key=lambda kv: -kv[1])[:8]
    print(
        f"\nimage {size / MB:.0f} MB = base {base / MB:.0f} MB + {(size - base) / MB:.0f} MB "
        f"(venv {sizes['venv'] / MB:.0f} MB: "
        + ", ".join(f"{name} {n / MB:.1f}" for name, n in top)
        + ")",
        file=sys.stderr,
    )
    assert size - base <= OVER_BASE_MAX, (size - base) / MB
    # the venv is what the runtime stage adds (the build stage's /src and pip cache stay out)
    assert size - base - sizes["venv"] < 5 * MB
    names = {name.split("-")[0].lower() for name in sizes["parts"]}
    assert {"faust", "rocksdict", "uvloop", "app"} <= names
    assert not {"pyspark", "pytest", "duckdb"} & names, "test or batch extras in the image"


def test_rocksdb_and_uvloop_load_as_the_image_user_on_a_read_only_root(engine, image):
    spec = pod_spec({})
    volume = new_volume(engine, f"etj-probe-{image.tag.split(':')[1]}")
    try:
        done = engine.run(
            "run",
            "--rm",
            "--read-only",
            "--cap-drop=ALL",
            "--security-opt",
            "no-new-privileges",
            "-v",
            f"{volume}:{spec.datadir}",
            "--entrypoint",
            "python",
            image.tag,
            "-c",
            NATIVE_PARTS,
        )
    finally:
        engine.run("volume", "rm", "-f", volume, check=False)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # a new volume at the datadir takes the image's ownership of it: the user can write there
    assert (got["uid"], got["gid"]) == (spec.run_as_user, spec.run_as_group)
    assert got["datadir"] == ["probe.db"]
    assert got["root_read_only"] is True
    assert got["orjson"] == '{"a":1}'


def test_the_image_runs_what_the_chart_runs_and_a_drift_is_caught(engine, image):
    (inspected,) = engine.inspect(image.tag, kind="image")
    built = image_config(inspected)
    assert drift(pod_spec({}), built) == []
    assert "/health/" in built["healthcheck"]

    # the environment the chart gives a pod (with snapshots: its credentials too) has only
    # names the worker reads: settings, boto3's, the pod's own name, glibc's arenas
    # (MALLOC_ARENA_MAX: docs/operating/scaling.md)
    env = pod_spec(
        {"snapshots": {"credentialsSecret": "s", "region": "eu-west-1"}},
        secrets={"s": {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "v"}},
    ).env
    settings = {"ETJ_" + name.upper() for name in Settings.model_fields}
    assert {n for n in env if n.startswith("ETJ_")} <= settings
    assert {n for n in env if not n.startswith("ETJ_")} == {
        "POD_NAME",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "MALLOC_ARENA_MAX",
    }

    # the same check on a chart that moved away from the image
    moved = pod_spec(
        {
            "persistence": {"mountPath": "/data"},
            "logLevel": "debug",
            "podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "livenessProbe": {"periodSeconds": 30},
        }
    )
    problems = drift(moved, built)
    assert {p.split(":")[0] for p in problems} == {
        "command",
        "user",
        "datadir",
        "ETJ_DATADIR",
        "healthcheck",
    }, problems
