"""The settings reference, made from :class:`app.settings.Settings` and nothing else.

Two files are generated from the one class, so they cannot disagree with the code or with
each other:

- ``docs/operating/settings.md``: the settings page of the docs site (every ``ETJ_*``
  variable, its default, its Helm value and what it means);
- the ``config`` part of ``helm/etj/values.schema.json``: the chart refuses a value that is not a
  setting, or that is typed differently.

And one from the chart's own ``values.yaml`` (its ``## @param`` lines and defaults):
``docs/operating/helm-values.md``.

``python -m app.docgen.settings_doc`` rewrites all three after a setting or a value changed; ``--check``
only says which is stale (exit 1). ``tests/docs/test_generated.py`` fails when one drifted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from app.docgen import generated_files
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_PAGE = ROOT / "docs" / "operating" / "settings.md"
HELM_SCHEMA = ROOT / "helm" / "etj" / "values.schema.json"
HELM_VALUES = ROOT / "helm" / "etj" / "values.yaml"
HELM_VALUES_PAGE = ROOT / "docs" / "operating" / "helm-values.md"

#: settings the chart sets itself (per pod, or from other values), not through ``config.*``
CHART_MANAGED = {
    "datadir": "`persistence.mountPath`",
    "web_port": "`web.port`",
    "web_bind": "set by the chart",
    "web_host": "the pod's DNS name",
    # one per pod, never shared: two workers with the same id fence each other out of the group
    "group_instance_id": "the pod's name (`staticMembership.enabled`)",
    # secrets: files from a mounted Secret, never in the ConfigMap
    "kafka_tls_ca_file": "`kafka.tls.secretName`",
    "kafka_tls_cert_file": "`kafka.tls.secretName`",
    "kafka_tls_key_file": "`kafka.tls.secretName`",
    "kafka_tls_key_password_file": "`kafka.tls.secretName`",
    "kafka_tls_key_password": "`extraEnv` (from a Secret)",
    "kafka_sasl_password_file": "`kafka.sasl.secretName`",
    "kafka_sasl_password": "`extraEnv` (from a Secret)",
    "views_token_file": "`web.auth.secretName`",
    "views_token": "`extraEnv` (from a Secret)",
    "schema_registry_password_file": "`extraVolumes`/`extraVolumeMounts` (a mounted Secret)",
    "schema_registry_password": "`extraEnv` (from a Secret)",
    # a trial of another Faust or aiokafka release, never a deployment's
    "untested_versions": "not in the chart",
}

#: the page's sections, in reading order; a setting in none of them lands in "Other"
GROUPS: list[tuple[str, str, list[str]]] = [
    (
        "Worker and broker",
        "Where the worker connects, where it keeps its state, how it is reached.",
        [
            "app_id",
            "broker_url",
            "store_url",
            "datadir",
            "rocksdb_write_buffer_mb",
            "rocksdb_memtables_mb",
            "rocksdb_block_cache_mb",
            "web_port",
            "web_bind",
            "web_host",
            "partitions",
            "replication_factor",
        ],
    ),
    (
        "Topics",
        "Every topic name is a setting, so several deployments (and the tests) can share "
        "one broker. What each topic holds: [topics and fields](../joins/topics.md).",
        [
            "moods_topic",
            "events_topic",
            "output_topic",
            "ticks_topic",
            "car_arrivals_topic",
            "zones_topic",
            "car_moves_topic",
            "car_ticks_topic",
            "car_pollution_topic",
            "movies_topic",
            "ratings_topic",
            "rated_movies_topic",
            "movie_ticks_topic",
            "dead_letter_topic",
            "late_topic",
        ],
    ),
    (
        "Event time and joins",
        "See [retention and late records](../concepts/retention.md) and "
        "[declarative joins](../joins/declarative.md).",
        [
            "retention_ms",
            "revisit_interval_s",
            "review_lag_ms",
            "movie_retention_ms",
            "movie_window_ms",
            "max_future_ms",
            "joins_file",
        ],
    ),
    (
        "Flow control",
        "See [flow control](../concepts/flow-control.md).",
        ["flow_control", "flow_max_idle_ms", "flow_max_buffered"],
    ),
    (
        "Snapshots",
        "Snapshots of the table partitions in object storage, for a worker that "
        "starts with nothing on disk: [snapshots](snapshots.md).",
        ["snapshot_url", "snapshot_interval_s", "snapshot_keep"],
    ),
    (
        "Delivery and the consumer group",
        "See [guarantees](../concepts/guarantees.md) and "
        "[the Faust and aiokafka patches](../contributing/patches.md).",
        [
            "producer_delivery_timeout_s",
            "producer_max_batch_size",
            "producer_max_request_bytes",
            "end_offsets_by_fetch",
            "consumer_fetch_max_wait_ms",
            "stall_check_s",
            "group_instance_id",
            "session_timeout_s",
            "heartbeat_interval_s",
            "rebalance_timeout_s",
            "commit_interval_s",
            "stop_drain_s",
        ],
    ),
    (
        "Another Faust or aiokafka",
        "The patches of `app/compat` are tested with exact "
        "versions; the worker refuses others: "
        "[moving to a new release](../contributing/patches.md#moving-to-a-new-release).",
        ["untested_versions"],
    ),
    (
        "Security",
        "TLS and SASL to Kafka, and the token of the state views: "
        "[security](security.md). A secret comes from its `_FILE` (a mounted Secret) or, else, "
        "from its variable.",
        [
            "kafka_tls",
            "kafka_tls_ca_file",
            "kafka_tls_cert_file",
            "kafka_tls_key_file",
            "kafka_tls_key_password_file",
            "kafka_tls_key_password",
            "kafka_sasl_mechanism",
            "kafka_sasl_username",
            "kafka_sasl_password_file",
            "kafka_sasl_password",
            "views_token_file",
            "views_token",
        ],
    ),
    (
        "Schema Registry",
        "Where a join spec's Avro, Protobuf and JSON-SR records find their writer schemas, "
        "and where an `output_format` registers its own: "
        "[Schema Registry formats](../joins/declarative.md#schema-registry-formats).",
        [
            "schema_registry_url",
            "schema_registry_username",
            "schema_registry_password_file",
            "schema_registry_password",
            "schema_registry_cache",
        ],
    ),
]

_HEADER = """\
<!-- GENERATED by `python -m app.docgen.settings_doc` from app/settings.py: do not edit by hand.
     tests/docs/test_generated.py fails when this page and the code disagree. -->

# Settings

Every setting is an environment variable with the prefix `ETJ_`, read once at start by one
pydantic-settings object (`app.settings.Settings`). An unknown `ETJ_` variable is ignored; a
value of the wrong type stops the worker at start with a message that names it.

In the Helm chart, `config.<name>` sets `ETJ_<NAME>` (for example `config.retention_ms` →
`ETJ_RETENTION_MS`); the chart's values schema is generated from the same class, so a misspelt
setting is refused by `helm install`. The chart sets a few settings itself (column *Helm*).

`make run` and the tests set `ETJ_PRODUCER_MAX_BATCH_SIZE=1` for the bundled tansu broker, and
the benchmarks also `ETJ_CONSUMER_FETCH_MAX_WAIT_MS=100` (see
[the test broker](../contributing/tests.md#the-test-broker)); leave both unset on a real Kafka.
"""


def env_name(name: str) -> str:
    return "ETJ_" + name.upper()


def default_text(field: FieldInfo) -> str:
    """The default as a reader types it: ``unset`` for None, durations in ms also in words."""
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"  # as it is written in the environment
    text = f"`{value}`"
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 60_000
        and value % 60_000 == 0
    ):
        minutes = value // 60_000
        words = (
            f"{minutes // 1440} d"
            if minutes % 1440 == 0
            else f"{minutes // 60} h"
            if minutes % 60 == 0
            else f"{minutes} min"
        )
        text += f" ({words})"
    return text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_page() -> str:
    """The whole of ``docs/operating/settings.md``."""
    fields = Settings.model_fields
    placed = {name for _, _, names in GROUPS for name in names}
    groups = [(title, intro, [n for n in names if n in fields]) for title, intro, names in GROUPS]
    rest = [n for n in fields if n not in placed]
    if rest:
        groups.append(("Other", "", rest))
    out = [_HEADER]
    for title, intro, names in groups:
        out.append(f"\n## {title}\n")
        if intro:
            out.append(f"\n{intro}\n")
        out.append("\n| variable | default | Helm | meaning |\n|---|---|---|---|\n")
        for name in names:
            field = fields[name]
            helm = CHART_MANAGED.get(name, f"`config.{name}`")
            out.append(
                f"| `{env_name(name)}` | {default_text(field)} | {helm} | "
                f"{_cell(field.description or '')} |\n"
            )
    return "".join(out)


def config_schema() -> dict[str, Any]:
    """JSON schema of ``config`` in the chart's values: one property per setting."""
    props = {}
    for name, prop in Settings.model_json_schema()["properties"].items():
        if name in CHART_MANAGED:
            continue
        props[name] = {k: v for k, v in prop.items() if k not in ("title", "default", "format")}
    return {"type": "object", "additionalProperties": False, "properties": props}


def helm_schema_text() -> str:
    """``values.schema.json`` as it is, with its ``config`` part generated."""
    schema = json.loads(HELM_SCHEMA.read_text())
    schema["properties"]["config"] = config_schema()
    return json.dumps(schema, indent=2) + "\n"


def helm_values_page() -> str:
    """The whole of ``docs/operating/helm-values.md``, from ``values.yaml``."""
    import yaml  # the test and docs tooling has it; the worker never imports this module

    values = yaml.safe_load(HELM_VALUES.read_text())
    out = [
        """\
<!-- GENERATED by `python -m app.docgen.settings_doc` from helm/etj/values.yaml: do not edit by hand.
     tests/docs/test_generated.py fails when this page and the chart disagree. -->

# Helm values

Every value of the chart `helm/etj`, with its default and what it does, in the order of
`values.yaml` (where each one is documented with `## @param`). `config.*` are the worker's
[settings](settings.md). How to use the chart: [the Helm chart](helm.md).
"""
    ]
    table_open = False
    for line in HELM_VALUES.read_text().splitlines():
        text = line.strip()
        if text.startswith("## @section "):
            out.append(f"\n## {text.removeprefix('## @section ').split(' (')[0]}\n")
            table_open = False
        elif text.startswith("## @param "):
            path, _, description = text.removeprefix("## @param ").partition(" ")
            node: Any = values
            for part in path.split("."):
                node = node[part]
            if not table_open:
                out.append("\n| value | default | meaning |\n|---|---|---|\n")
                table_open = True
            default = json.dumps(node, ensure_ascii=False)
            out.append(f"| `{path}` | `{default}` | {_cell(description)} |\n")
    return "".join(out)


def generated() -> dict[Path, str]:
    """Every generated file and what it must hold."""
    return {
        SETTINGS_PAGE: settings_page(),
        HELM_SCHEMA: helm_schema_text(),
        HELM_VALUES_PAGE: helm_values_page(),
    }


def stale() -> list[Path]:
    """The generated files whose content differs from what the code gives."""
    return generated_files.stale(generated())


def main(argv: list[str]) -> int:
    return generated_files.write_or_check(argv, generated, "python -m app.docgen.settings_doc")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
