"""The chart's join specs as a value and its topics Job (docs/operating/helm.md#join-specs-as-a-value,
docs/operating/helm.md#creating-the-topics-a-hook-job): the specs reach the worker as the file it
reads, a change of them rolls the pods (and nothing else does), and the Job that creates the
topics before install and upgrade runs the workers' image with their settings, environment,
Secrets and security context."""

from __future__ import annotations

import copy
import json
import posixpath
import re
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.joins.catalog import load_specs, read_joins_file
from app.settings import Settings
from tests.deploy.test_deploy import (
    KUBE_VERSION,
    ROOT,
    config_map_env,
    one,
    render,
    worker_container,
)
from tests.deploy.test_security_chart import SECURED
from tests.docs.pages import DOCS, README, block

#: the values of docs/operating/helm.md's example: the README's `tiers` join, and the topics Job
EXAMPLE: dict[str, Any] = yaml.safe_load(block(DOCS / "operating" / "helm.md", "helm-joins"))
HOOK = "helm.sh/hook"


def annotations(docs: list[dict[str, Any]]) -> dict[str, str]:
    sts = one(docs, "StatefulSet")
    out: dict[str, str] = sts["spec"]["template"]["metadata"]["annotations"]
    return out


def mounted_joins(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(ETJ_JOINS_FILE, the content the worker finds there): through the pod's volume, its
    mount and the ConfigMap the volume names."""
    path = config_map_env(docs)["ETJ_JOINS_FILE"]
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    (mount,) = [
        m for m in worker_container(docs)["volumeMounts"] if path.startswith(m["mountPath"] + "/")
    ]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    cm = one(docs, "ConfigMap", volume["configMap"]["name"])
    key = posixpath.relpath(path, mount["mountPath"])
    return path, cm["data"][key]


def settings_with(tmp_path, content: str, **env: Any) -> Settings:
    file = tmp_path / "joins.json"
    file.write_text(content)
    return Settings(joins_file=file, **env)


# ---- joins -------------------------------------------------------------------------------


def test_the_example_is_the_readme_join():
    assert EXAMPLE["joins"] == json.loads(block(README, "minimal-spec"))


def test_the_joins_value_reaches_the_worker_as_the_file_it_reads(tmp_path):
    docs = render(EXAMPLE)
    path, content = mounted_joins(docs)
    assert path == "/etc/etj/joins/joins.json"
    s = settings_with(tmp_path, content)
    assert read_joins_file(s.joins_file) == EXAMPLE["joins"]
    # with a joins file and no config.builtin_joins, the worker runs that file's joins only
    assert [spec.name for spec in load_specs(s)] == ["tiers"]

    moods_too = render({**EXAMPLE, "config": {"builtin_joins": "moods"}})
    s = settings_with(tmp_path, mounted_joins(moods_too)[1], builtin_joins="moods")
    assert sorted(spec.name for spec in load_specs(s)) == ["moods", "tiers"]


def test_joins_given_as_a_file_are_written_as_they_are(tmp_path):
    """`--set-file joins=joins.json`: the value is the file's text, kept byte for byte."""
    text = '{"joins": ' + block(README, "minimal-spec") + "}\n"
    _, content = mounted_joins(render({"joins": text}))
    assert content == text.rstrip("\n")  # a `|-` block: YAML drops the final newline only
    assert [spec.name for spec in load_specs(settings_with(tmp_path, content))] == ["tiers"]


def test_without_joins_nothing_is_mounted_and_no_file_is_named():
    docs = render()
    assert "ETJ_JOINS_FILE" not in config_map_env(docs)
    assert "checksum/joins" not in annotations(docs)
    assert not [d for d in docs if d["metadata"]["name"].endswith("-joins")]
    assert "joins" not in {m["name"] for m in worker_container(docs)["volumeMounts"]}


def test_the_checksum_changes_when_the_joins_change_and_not_otherwise():
    base = annotations(render(EXAMPLE))
    assert re.fullmatch(r"[0-9a-f]{64}", base["checksum/joins"])

    changed = copy.deepcopy(EXAMPLE)
    changed["joins"][0]["retention_ms"] = 2 * 86_400_000
    after = annotations(render(changed))
    assert after["checksum/joins"] != base["checksum/joins"]
    assert after["checksum/config"] == base["checksum/config"]  # the settings did not change

    # the same specs, another order of their keys, more replicas: the same pods
    reordered = copy.deepcopy(EXAMPLE)
    reordered["joins"] = [dict(reversed(list(spec.items()))) for spec in EXAMPLE["joins"]]
    assert annotations(render(reordered)) == base
    assert annotations(render({**EXAMPLE, "replicaCount": 5})) == base
    # adding specs to a release that had none rolls its pods too (ETJ_JOINS_FILE is a setting)
    assert annotations(render())["checksum/config"] != base["checksum/config"]


def test_joins_and_a_joins_file_of_ones_own_are_refused_together():
    with pytest.raises(Exception, match="config.joins_file"):
        render({**EXAMPLE, "config": {"joins_file": "/specs/joins.json"}})


# ---- the topics Job ------------------------------------------------------------------------


def hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if HOOK in d["metadata"].get("annotations", {})]


def job_env(docs: list[dict[str, Any]]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """(the data of the ConfigMap the Job's envFrom names, its container's env)."""
    (c,) = one(docs, "Job")["spec"]["template"]["spec"]["containers"]
    refs = [e["configMapRef"]["name"] for e in c["envFrom"] if "configMapRef" in e]
    (name,) = refs
    return one(docs, "ConfigMap", name)["data"], c.get("env", [])


@pytest.mark.parametrize("variant", ["example", "secured"])
def test_the_topics_job_runs_like_a_worker_with_the_same_settings_env_and_secrets(variant):
    values = EXAMPLE if variant == "example" else {**SECURED, "topicsJob": {"enabled": True}}
    docs = render(values)
    job = one(docs, "Job")
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    worker = worker_container(docs)
    worker_pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]

    data, env = job_env(docs)
    assert data == config_map_env(docs)
    # the worker's own name and group identity, meaningless to a Job (not a group member)
    per_pod = {"POD_NAME", "ETJ_WEB_HOST", "ETJ_GROUP_INSTANCE_ID"}
    assert env == [e for e in worker["env"] if e["name"] not in per_pod]
    assert c["envFrom"][1:] == worker["envFrom"][1:]  # extraEnvFrom

    assert c["image"] == worker["image"]
    assert c["command"] == worker["command"] == ["faust", "-A", "app.main"]
    assert c["args"] == ["topics", "create"]
    assert c["securityContext"] == worker["securityContext"]
    assert pod["securityContext"] == worker_pod["securityContext"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False

    # the worker's Secrets and join specs at the same paths, from the Job's own ConfigMap copy
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    for m in worker["volumeMounts"]:
        if m["name"] not in ("datadir", "tmp"):
            assert mounts[m["name"]] == m
    volumes = {v["name"]: v for v in pod["volumes"]}
    for v in worker_pod["volumes"]:
        if "secret" in v:
            assert volumes[v["name"]] == v
    if "joins" in volumes:
        copy_of = one(docs, "ConfigMap", volumes["joins"]["configMap"]["name"])
        assert copy_of["data"] == one(docs, "ConfigMap", "etj-joins")["data"]
    # a read-only root filesystem: the datadir and /tmp are writable volumes, as in a worker
    assert {mounts["datadir"]["mountPath"], mounts["tmp"]["mountPath"]} == {
        data["ETJ_DATADIR"],
        "/tmp",
    }

    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_topics_job_is_a_hook_before_install_and_upgrade_after_its_configmaps():
    docs = render(EXAMPLE)
    made = hooks(docs)
    assert {d["kind"] for d in made} == {"Job", "ConfigMap"}
    job = one(docs, "Job")
    for d in made:
        a = d["metadata"]["annotations"]
        assert set(a[HOOK].split(",")) == {"pre-install", "pre-upgrade"}
        assert set(a["helm.sh/hook-delete-policy"].split(",")) == {
            "before-hook-creation",
            "hook-succeeded",
        }
        if d is not job:
            assert int(a["helm.sh/hook-weight"]) < int(
                job["metadata"]["annotations"][HOOK + "-weight"]
            )
    # what the Job needs before the release exists is among the hooks
    names = {d["metadata"]["name"] for d in made}
    pod = job["spec"]["template"]["spec"]
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} <= names
    (c,) = pod["containers"]
    assert c["envFrom"][0]["configMapRef"]["name"] in names
    assert pod["serviceAccountName"] == "default"  # the chart's own does not exist yet


def test_the_topics_job_is_off_by_default_and_takes_its_options():
    assert not hooks(render()) and not [d for d in render() if d["kind"] == "Job"]
    (c,) = one(render({"topicsJob": {"enabled": True, "inputs": True}}), "Job")["spec"]["template"][
        "spec"
    ]["containers"]
    assert c["args"] == ["topics", "create", "--inputs"]
    own = {"enabled": True, "serviceAccountName": "etj-admin"}
    assert (
        one(render({"topicsJob": own}), "Job")["spec"]["template"]["spec"]["serviceAccountName"]
        == "etj-admin"
    )
    existing = {
        "serviceAccount": {"create": False, "name": "streams"},
        "topicsJob": {"enabled": True},
    }
    assert (
        one(render(existing), "Job")["spec"]["template"]["spec"]["serviceAccountName"] == "streams"
    )


def test_the_topics_job_command_is_one_the_worker_image_runs():
    """`faust -A app.main topics --help` (the app's own CLI) takes the Job's arguments."""
    (c,) = one(render({"topicsJob": {"enabled": True, "inputs": True}}), "Job")["spec"]["template"][
        "spec"
    ]["containers"]
    command, args = c["command"], c["args"]
    assert command[0] == "faust"
    done = subprocess.run(
        [sys.executable, "-m", *command, args[0], "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    usage = re.search(r"Usage: .* topics \[OPTIONS\] \{([^}]*)\}", done.stdout)
    assert usage and args[1] in usage.group(1).split("|"), done.stdout
    for option in args[2:]:
        assert re.search(rf"^\s+{re.escape(option)}\b", done.stdout, re.M), done.stdout


def test_the_topics_job_pod_is_no_worker_to_the_services_and_policies():
    docs = render({**EXAMPLE, "networkPolicy": {"enabled": True}})
    labels = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    selectors = [one(docs, "StatefulSet")["spec"]["selector"]["matchLabels"]]
    selectors += [d["spec"]["selector"] for d in docs if d["kind"] == "Service"]
    selectors += [
        d["spec"]["selector"]["matchLabels"] for d in docs if d["kind"] == "PodDisruptionBudget"
    ]
    selectors += [one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"]]
    for selector in selectors:
        assert not selector.items() <= labels.items(), selector
