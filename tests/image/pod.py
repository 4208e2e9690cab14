"""What Kubernetes runs, read from the chart: the one source of the tier's ``docker run``.

The chart's StatefulSet is rendered by Helm's own code (as tests/deploy does) with the test's
settings as chart values; its worker container becomes a :class:`PodSpec` (command and args,
user, datadir mount, the writable ``/tmp``, the security context, memory limit, probes, grace
period) and the environment the kubelet would give it (the ConfigMap, then the container's
``env`` with ``fieldRef``, ``secretKeyRef`` and ``$(VAR)`` resolved). The containers of the
tier run exactly that (:mod:`tests.image.containers`), so a chart change reaches them; where
the image and the chart must agree on their own (the image's entrypoint, user, datadir,
healthcheck), :func:`drift` says where they do not, and a test fails on it.

Two deliberate differences from a cluster, both of networking: the containers share the host's
network (the test broker listens on 127.0.0.1), so each gets its own ``ETJ_WEB_PORT``; and the
pods' stable DNS names (``ETJ_WEB_HOST``, what each announces to the other workers) are mapped
to 127.0.0.1 in every container's ``/etc/hosts``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.deploy.test_deploy import CHART, config_map_env, one, render, worker_container

#: chart values are typed (values.schema.json); env strings are parsed back where they can be
SCHEMA_CONFIG = set(
    json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]["properties"]
)


@dataclass(frozen=True)
class PodSpec:
    """The worker container of the rendered StatefulSet, environment resolved."""

    command: list[str]
    args: list[str]
    run_as_user: int
    run_as_group: int
    run_as_non_root: bool
    datadir: str  # mount path of the datadir claim
    tmp: str  # mount path of the writable emptyDir
    tmp_size: str
    read_only_root: bool
    drop_capabilities: list[str]
    no_new_privileges: bool
    memory_limit: str
    web_port: int  # containerPort "web"
    probes: dict[str, str]  # startupProbe / livenessProbe / readinessProbe -> HTTP path
    #: the liveness probe's (periodSeconds, timeoutSeconds, failureThreshold), and the startup
    #: probe's budget (periodSeconds x failureThreshold): what a HEALTHCHECK can mirror
    liveness: tuple[int, int, int]
    startup_budget_s: int
    grace_s: int  # terminationGracePeriodSeconds
    env: dict[str, str] = field(default_factory=dict)

    @property
    def web_host(self) -> str:
        return self.env["ETJ_WEB_HOST"]


def chart_values(env: dict[str, str], **values: Any) -> dict[str, Any]:
    """Chart values that give a pod ``env``: settings the chart knows go to ``config`` (typed
    back from their strings), any other variable to ``extraEnv``; then ``values`` on top."""
    config: dict[str, Any] = {}
    extra = []
    for key, value in env.items():
        name = key.removeprefix("ETJ_").lower()
        if key.startswith("ETJ_") and name in SCHEMA_CONFIG:
            try:
                config[name] = json.loads(value)
            except ValueError:
                config[name] = value
        else:
            extra.append({"name": key, "value": value})
    out: dict[str, Any] = {"config": config, "extraEnv": extra}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (an unknown name stays as written)."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def pod_env(
    docs: list[dict[str, Any]], pod_name: str, secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The worker's environment as the kubelet builds it: ``envFrom`` first, then ``env``."""
    env = dict(config_map_env(docs))
    for entry in worker_container(docs).get("env", []):
        if "value" in entry:
            env[entry["name"]] = _expand(str(entry["value"]), env)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.name", source
            env[entry["name"]] = pod_name
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            if ref["key"] in secrets.get(ref["name"], {}):
                env[entry["name"]] = secrets[ref["name"]][ref["key"]]
            else:
                assert ref.get("optional"), f"secret {ref['name']}/{ref['key']} is missing"
        else:
            raise AssertionError(f"env source the tier cannot resolve: {entry}")
    return env


def pod_spec(
    values: dict[str, Any],
    pod_name: str = "etj-0",
    secrets: dict[str, dict[str, str]] | None = None,
) -> PodSpec:
    docs = render(values)
    sts = one(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = worker_container(docs)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    sc, psc = c["securityContext"], pod["securityContext"]
    return PodSpec(
        command=list(c["command"]),
        args=list(c["args"]),
        run_as_user=int(sc.get("runAsUser", psc["runAsUser"])),
        run_as_group=int(sc.get("runAsGroup", psc["runAsGroup"])),
        run_as_non_root=bool(sc.get("runAsNonRoot", psc.get("runAsNonRoot"))),
        datadir=mounts[claim["metadata"]["name"]],
        tmp=mounts["tmp"],
        tmp_size=volumes["tmp"]["emptyDir"]["sizeLimit"],
        read_only_root=bool(sc["readOnlyRootFilesystem"]),
        drop_capabilities=list(sc["capabilities"]["drop"]),
        no_new_privileges=sc["allowPrivilegeEscalation"] is False,
        memory_limit=c["resources"]["limits"]["memory"],
        web_port={p["name"]: p["containerPort"] for p in c["ports"]}["web"],
        probes={
            p: c[p]["httpGet"]["path"]
            for p in ("startupProbe", "livenessProbe", "readinessProbe")
            if p in c
        },
        liveness=(
            c["livenessProbe"]["periodSeconds"],
            c["livenessProbe"]["timeoutSeconds"],
            c["livenessProbe"]["failureThreshold"],
        ),
        startup_budget_s=c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"],
        grace_s=int(pod["terminationGracePeriodSeconds"]),
        env=pod_env(docs, pod_name, secrets or {}),
    )


def image_config(inspected: dict[str, Any]) -> dict[str, Any]:
    """What the built image says about itself (``docker image inspect``), in the pod's terms."""
    cfg = inspected["Config"]
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
    health = cfg.get("Healthcheck") or {}
    seconds = {
        k: int(health.get(k, 0) // 1_000_000_000) for k in ("Interval", "Timeout", "StartPeriod")
    }
    return {
        "command": (cfg.get("Entrypoint") or []) + (cfg.get("Cmd") or []),
        "user": cfg.get("User", ""),
        "volumes": sorted(cfg.get("Volumes") or {}),
        "env": env,
        "ports": sorted(cfg.get("ExposedPorts") or {}),
        "healthcheck": " ".join(health.get("Test") or []),
        "health_timing": (seconds["Interval"], seconds["Timeout"], int(health.get("Retries", 0))),
        "health_start_period": seconds["StartPeriod"],
    }


def drift(spec: PodSpec, image: dict[str, Any]) -> list[str]:
    """Where the image and the chart disagree on what runs; empty when they agree."""
    out = []
    if image["command"] != spec.command + spec.args:
        out.append(f"command: image {image['command']}, chart {spec.command + spec.args}")
    uid, _, gid = image["user"].partition(":")
    if (uid, gid or uid) != (str(spec.run_as_user), str(spec.run_as_group)):
        out.append(f"user: image {image['user']!r}, chart {spec.run_as_user}:{spec.run_as_group}")
    if spec.run_as_non_root and uid in ("", "0", "root"):
        out.append("user: the image runs as root, the chart refuses root")
    if image["volumes"] != [spec.datadir]:
        out.append(f"datadir: image volume {image['volumes']}, chart mounts {spec.datadir}")
    for name in ("ETJ_DATADIR", "ETJ_WEB_PORT"):
        if image["env"].get(name) != spec.env.get(name):
            out.append(f"{name}: image {image['env'].get(name)!r}, chart {spec.env.get(name)!r}")
    if f"{spec.web_port}/tcp" not in image["ports"]:
        out.append(f"web port: image exposes {image['ports']}, chart {spec.web_port}")
    for probe in ("livenessProbe", "startupProbe"):
        path = spec.probes.get(probe)
        if path and path not in image["healthcheck"]:
            out.append(
                f"healthcheck: the {probe} asks {path}, the image's HEALTHCHECK "
                f"{image['healthcheck']}"
            )
    if "ETJ_WEB_PORT" not in image["healthcheck"]:
        out.append("healthcheck: the image's HEALTHCHECK does not follow ETJ_WEB_PORT")
    if image["health_timing"] != spec.liveness:
        out.append(
            f"healthcheck: interval/timeout/retries {image['health_timing']}, the "
            f"chart's liveness probe {spec.liveness}"
        )
    if image["health_start_period"] != spec.startup_budget_s:
        out.append(
            f"healthcheck: start period {image['health_start_period']} s, the chart's "
            f"startup budget {spec.startup_budget_s} s"
        )
    return out
