"""Every topic a worker uses and the Kafka ACLs it needs, from the spec list (one source).

The inventory is made from the settings and the join specs the worker runs
(:func:`app.joins.catalog.load_specs`: built-ins and ``ETJ_JOINS_FILE``) by the same naming
rules :mod:`app.topology` declares them with: per join spec its events, dimension, ticks and
output topics and its four tables' changelogs (``<app id>-<table>-changelog``, Faust's
naming); the car join's topics and tables; the shared dead-letter and late topics; Faust's
leader-election topic. ``tests/docs/test_topics_page.py`` holds it to what :mod:`app.topology`
really declares, and the page to what this module generates, so neither can drift.

``python -m app.docgen.topics_doc`` rewrites docs/operating/topics.md (default settings and the
built-in joins, plus the README's example spec); ``--check`` says whether it is stale;
``--print`` prints the tables for *this* environment (your ``ETJ_*`` names, app id and
``ETJ_JOINS_FILE``), ready for your ACLs.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.docgen import generated_files
from app.joins.catalog import load_fk_specs, load_specs
from app.joins.fk_spec import FkJoinSpec
from app.joins.resolve import resolve_all
from app.joins.spec import JoinSpec
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operating" / "topics.md"

#: operations on a topic, by what the worker does with it (Kafka ACL operation names)
READ = ("Read", "Describe")
WRITE = ("Write", "Describe")
OWN = ("Read", "Write", "Describe", "Create")  # topics the worker creates itself (internal)


@dataclass(frozen=True)
class TopicUse:
    """One topic of one join: what it holds, who creates it, what the worker does with it."""

    topic: str
    join: str  # a spec name, "car join" or "every join"
    what: str
    created_by: str  # "you" (or the broker's auto-creation) / "the worker"
    operations: tuple[str, ...]
    #: its partition count (``topics create`` makes it so; None: the broker's default)
    partitions: int | None = None
    #: cleanup.policy=compact (a table's changelog); else Kafka's default, delete
    compacted: bool = False
    #: its records' event time is their Kafka timestamp (a ``$timestamp`` spec side): it must
    #: be produced with CreateTime, not LogAppendTime
    timed_by_timestamp: bool = False

    @property
    def kind(self) -> str:
        """input, output, side (dead letters, late) or internal: what ``topics create``
        creates (inputs only when asked)."""
        return (
            self.what.split(":", 1)[0]
            if ":" in self.what and self.what.split(":", 1)[0] in ("input", "output", "internal")
            else ("side" if self.created_by == "you" else "internal")
        )

    @property
    def read_by_worker(self) -> bool:
        return "Read" in self.operations


def changelog(s: Settings, table: str) -> str:
    """Faust's name of a table's changelog topic."""
    return f"{s.app_id}-{table}-changelog"


def leader_topic(s: Settings) -> str:
    """Faust's leader-election topic (one partition; the assignor's)."""
    return f"{s.app_id}-__assignor-__leader"


def _keyed(side: Any) -> str:
    """What a repartitioned input may be keyed by (any count of partitions, too)."""
    return " (any key, any partition count: repartitioned)" if side.repartition else ""


def join_topics(s: Settings, spec: JoinSpec, links: Collection[str] = ()) -> list[TopicUse]:
    """A join's topics; ``links``: the internal links between dimensions of the specs run
    with it (:mod:`app.joins.dimensions`), which the worker creates, not you."""
    n = spec.name
    t = spec.tables
    p = spec.partitions or s.partitions
    out = [
        TopicUse(
            spec.events.topic,
            n,
            "internal: the link from the dimension before"
            + (
                ", read by join id (repartitioned)"
                if spec.events.repartition
                else f", keyed by {'+'.join(spec.events.key_parts)}: read as it is"
            ),
            "the worker",
            OWN,
            p,
        )
        if spec.events.topic in links
        else TopicUse(
            spec.events.topic,
            n,
            "input: events" + _keyed(spec.events),
            "you",
            READ,
            None if spec.events.repartition else p,
            timed_by_timestamp=spec.events.from_timestamp,
        ),
        TopicUse(
            spec.dimension.topic,
            n,
            "input: dimension versions" + _keyed(spec.dimension),
            "you",
            READ,
            None if spec.dimension.repartition else p,
            timed_by_timestamp=spec.dimension.from_timestamp,
        ),
        TopicUse(
            spec.output,
            n,
            "internal: the link to the next dimension: its revisions, keyed by "
            + ("join id" if spec.output_key is None else "+".join(spec.output_key[0])),
            "the worker",
            OWN,
            p,
        )
        if spec.internal_output
        else TopicUse(spec.output, n, "output: the revision log", "you", WRITE, s.partitions),
        TopicUse(
            spec.ticks,
            n,
            "internal: revisit ticks, co-partitioned with the inputs",
            "the worker",
            OWN,
            p,
        ),
    ]
    for name, side in (("events", spec.events), ("dimension", spec.dimension)):
        if side.repartition:
            out.append(
                TopicUse(
                    side.repartition,
                    n,
                    f"internal: {side.topic}'s records re-keyed "
                    f"by {side.path_of(side.key)} (the {name}' repartition topic), "
                    "co-partitioned with the inputs",
                    "the worker",
                    OWN,
                    p,
                )
            )
    if spec.final_topic is not None:
        out.insert(
            3,
            TopicUse(
                spec.final_topic,
                n,
                "output: finality promises, one record per join partition (key: the partition)",
                "you",
                WRITE,
                1,
                compacted=True,
            ),
        )
    for table, what in (
        (
            t.dimension,
            "the dimension's versions per key in the layout before "
            "a row per version, read once to convert them",
        ),
        (
            t.joins,
            "the dimension's versions, a row per version, and the joins "
            "in retention, a row per join (its indexes are derived from "
            "them, not logged)",
        ),
        (t.clock, "stream time per partition"),
    ):
        out.append(
            TopicUse(
                changelog(s, table),
                n,
                f"changelog of table `{table}`: {what}",
                "the worker",
                OWN,
                p,
                compacted=True,
            )
        )
    return out


def fk_topics(s: Settings, spec: FkJoinSpec) -> list[TopicUse]:
    """A foreign-key join's topics (the car join's in its own words)."""
    p = spec.partitions or s.partitions
    t = spec.tables
    if spec.name == "cars":
        j = "car join"
        words = [
            "input: car arrivals",
            "input: zone pollution readings",
            "output: the car view",
            "internal: DEL/ADD moves of cars, keyed by zone id",
            "internal: wake-ups of the zone side's flow control",
        ]
        tables = [f"changelog of table `{n}`" for n in (t.left, t.right, t.index)]
    else:
        j = spec.name
        words = [
            "input: left table (latest version per key)",
            "input: right table (latest version per key)",
            "output: each left row with its right version, keyed by left key",
            "internal: DEL/ADD moves of left rows, keyed by right key",
            "internal: wake-ups of the right side's flow control",
        ]
        tables = [
            f"changelog of table `{t.left}`: the newest left version per key",
            f"changelog of table `{t.right}`: the newest right version per key",
            f"changelog of table `{t.index}`: the left rows under each right key",
        ]
    # moves are written by the left side and read by the right side: one worker does both
    return [
        TopicUse(
            spec.left.topic,
            j,
            words[0],
            "you",
            READ,
            p,
            timed_by_timestamp=spec.left.from_timestamp,
        ),
        TopicUse(
            spec.right.topic,
            j,
            words[1],
            "you",
            READ,
            p,
            timed_by_timestamp=spec.right.from_timestamp,
        ),
        TopicUse(spec.output, j, words[2], "you", WRITE, s.partitions),
        TopicUse(spec.moves, j, words[3], "the worker", OWN, p),
        TopicUse(spec.ticks, j, words[4], "the worker", OWN, p),
        *(
            TopicUse(changelog(s, n), j, what, "the worker", OWN, p, compacted=True)
            for n, what in zip((t.left, t.right, t.index), tables)
        ),
    ]


def shared_topics(s: Settings) -> list[TopicUse]:
    j = "every join"
    return [
        TopicUse(
            s.dead_letter_topic,
            j,
            "invalid input records, with the reason",
            "you",
            WRITE,
            s.partitions,
        ),
        TopicUse(
            s.late_topic,
            j,
            "input records older than their join's horizon",
            "you",
            WRITE,
            s.partitions,
        ),
        TopicUse(
            leader_topic(s), j, "Faust's leader election (one partition)", "the worker", OWN, 1
        ),
    ]


def inventory(s: Settings, specs: Iterable[JoinSpec]) -> list[TopicUse]:
    """Every topic the worker with these settings and specs uses, per join (an input several
    joins read is listed under each, saying which others read it)."""
    out: list[TopicUse] = []
    specs = list(specs)
    links = {spec.output for spec in specs if spec.internal_output}
    for spec in specs:
        out += join_topics(s, spec, links)
    for fk in load_fk_specs(s):
        out += fk_topics(s, fk)
    return _shared_inputs(out) + shared_topics(s)


def _shared_inputs(uses: list[TopicUse]) -> list[TopicUse]:
    """``uses``, an input read by several joins saying which others read it."""
    readers: dict[str, list[str]] = {}
    for u in uses:
        if u.kind == "input":
            readers.setdefault(u.topic, []).append(u.join)
    return [
        dataclasses.replace(
            u,
            what=f"{u.what}; also read by "
            + ", ".join(f"join `{j}`" for j in readers[u.topic] if j != u.join)
            + " ([one topic, several joins](../joins/declarative.md#one-topic-several-joins))",
        )
        if u.kind == "input" and len(readers[u.topic]) > 1
        else u
        for u in uses
    ]


# --- the page -------------------------------------------------------------------------------


def _example_spec(repartition: str | None = None) -> dict[str, Any]:
    """The README's example spec (``tiers``), as a join of your own (with ``"repartition":
    true`` on the side ``repartition`` names)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- example: minimal-spec -->", 1)[1].split("```json", 1)[1]
    spec: dict[str, Any] = json.loads(block.split("```", 1)[0])[0]
    if repartition is not None:
        spec[repartition] = {**spec[repartition], "repartition": True}
    return spec


def _dimensions_example() -> dict[str, Any]:
    """The example spec of several dimensions (``enriched``, docs/joins/declarative.md)."""
    text = (ROOT / "docs" / "joins" / "declarative.md").read_text(encoding="utf-8")
    block = text.split("<!-- example: dimensions-spec -->", 1)[1].split("```json", 1)[1]
    spec: dict[str, Any] = json.loads(block.split("```", 1)[0])
    return spec


def _table(uses: list[TopicUse]) -> str:
    rows = ["| topic | what it holds | created by | the worker needs |", "|---|---|---|---|"]
    rows += [
        f"| `{u.topic}` | {u.what} | {u.created_by} | {', '.join(u.operations)} |" for u in uses
    ]
    return "\n".join(rows) + "\n"


def tables(s: Settings, specs: list[JoinSpec]) -> str:
    """The per-join tables and the ACL commands of one configuration (markdown)."""
    uses = inventory(s, specs)
    out = []
    fks = ["car join" if f.name == "cars" else f.name for f in load_fk_specs(s)]
    for join in [*(sp.name for sp in specs), *fks, "every join"]:
        title = join if join in ("car join", "every join") else f"join `{join}`"
        out.append(f"\n### {title[0].upper() + title[1:]}\n\n")
        out.append(_table([u for u in uses if u.join == join]))
    out.append(
        f"\n### Consumer group\n\nThe worker's group is its app id, `{s.app_id}` "
        "(`ETJ_APP_ID`): Read and Describe on the group.\n"
    )
    out.append(
        "\n### As `kafka-acls` commands\n\nFor a principal `User:etj` (replace it, and "
        "the bootstrap server):\n\n```sh\n"
    )
    acl = "kafka-acls.sh --bootstrap-server kafka:9092 --add --allow-principal User:etj"
    by_ops: dict[tuple[str, ...], list[str]] = {}
    for u in uses:
        if u.created_by == "you" and u.topic not in by_ops.get(u.operations, ()):
            by_ops.setdefault(u.operations, []).append(u.topic)  # a shared input: once
    for ops, topics in by_ops.items():
        out.append(
            f"{acl} {' '.join(f'--operation {o}' for o in ops)} \\\n    "
            + " ".join(f"--topic {t}" for t in topics)
            + "\n"
        )
    out.append(
        f"{acl} {' '.join(f'--operation {o}' for o in OWN)} \\\n    "
        f"--resource-pattern-type prefixed --topic {s.app_id}- \\\n    "
        + " ".join(
            f"--topic {u.topic}"
            for u in uses
            if u.created_by == "the worker" and not u.topic.startswith(f"{s.app_id}-")
        )
        + "\n"
    )
    out.append(f"{acl} --operation Read --operation Describe --group {s.app_id}\n```\n")
    return "".join(out)


_HEADER = """\
<!-- GENERATED by `python -m app.docgen.topics_doc` from the join specs and app/docgen/topics_doc.py: do not
     edit by hand. tests/docs/test_topics_page.py fails when this page, the code that
     generates it or what app/topology.py declares disagree. -->

# Topics and ACLs

Every topic a worker uses, per join, with what it holds, who creates it and the operations the
worker needs on it: the Kafka ACLs of its principal. Shown for the default settings
([settings](settings.md): every topic name is a setting, the changelogs and the leader topic
are prefixed with `ETJ_APP_ID`) and the built-in joins; a join of your own adds the same
shape (below: the README's `tiers` example). A worker with `ETJ_JOINS_FILE` runs only that
file's joins, and uses only their topics and the shared ones ("every join"): the built-in joins
and their `etj-*` topics only if `ETJ_BUILTIN_JOINS` names them. For *your* configuration,
print the same tables:

```sh
ETJ_JOINS_FILE=joins.json .venv/bin/python -m app.docgen.topics_doc --print
```

**Created by you** means the worker does not declare the topic: create it before the worker
starts, with the join's partition count (a spec's `partitions`, else `ETJ_PARTITIONS`; a
broker that auto-creates topics,
`auto.create.topics.enable`, gives them its own `num.partitions`: make it the same, or the
worker refuses to start). A join's input topics and its ticks topic must be
[co-partitioned](../concepts/event-time.md#co-partitioning); the worker refuses to start when
they are not. **Created by the worker**: internal topics and table changelogs (compacted), made
with the join's partition count and `ETJ_REPLICATION_FACTOR` replicas; it needs `Create` on
them (a prefixed ACL on `<app id>-` covers the changelogs and the leader topic).

Other clients need less: the batch twin's `archive` reads (`Read`, `Describe`; no group),
`backfill` writes the join's output (`Write`, `Describe`), `join-latest`, `watch` and
`app.downstream.mood_counts` read an output without a group. Output topics must not be compacted:
after a crash an older revision can be re-emitted after a newer one, and compaction would keep
the older ([the revision log](../concepts/revision-log.md#what-a-consumer-must-expect)).
Retention for the batch twin's ranges: [an event-time range](../batch/index.md#an-event-time-range).

## The default configuration
"""


def page() -> str:
    """The whole of docs/operating/topics.md."""
    s = Settings.model_construct()  # defaults, whatever this process's environment says
    own = [u for spec in resolve_all([_example_spec()], s.app_id) for u in join_topics(s, spec)]
    return (
        _HEADER
        + tables(s, load_specs(s))
        + "\n## A join of your own\n\nThe README's example spec `tiers` "
        "([declarative joins](../joins/declarative.md)) adds these, with the same ACLs "
        "as any join's; run alone (`ETJ_JOINS_FILE` and no `ETJ_BUILTIN_JOINS`), the worker "
        "uses these and the topics of *every join* above, nothing else:\n\n"
        + _table(own)
        + '\nWith `"repartition": true` on a side ([any record key]'
        "(../joins/declarative.md#any-record-key)), that side's topic may have any key and "
        "any partition count, and the worker creates one more internal topic (covered by the "
        "prefixed ACL); for `tiers` with its events side repartitioned:\n\n"
        + _table(
            [
                u
                for spec in resolve_all([_example_spec(repartition="events")], s.app_id)
                for u in join_topics(s, spec)
                if u.topic in (spec.events.topic, spec.events.repartition)
            ]
        )
        + "\nSeveral joins may read one input ([one topic, several joins]"
        "(../joins/declarative.md#one-topic-several-joins)): it is listed under each, naming "
        "the others, and needs the same ACLs once; `tiers`' inputs, when a second join "
        "`clicks` reads them too:\n\n"
        + _table(
            [
                u
                for u in _shared_inputs(
                    [
                        u
                        for spec in resolve_all(
                            [_example_spec(), _second_join(_example_spec())], s.app_id
                        )
                        for u in join_topics(s, spec)
                    ]
                )
                if u.kind == "input" and u.join == "tiers"
            ]
        )
        + "\nWith [several dimensions](../joins/declarative.md#several-dimensions), each "
        "dimension is a join of its own (`<name>-<dim>`, with its ticks topic, tables and hops "
        "as above), and the worker creates a link topic between each two, keyed by the next "
        "dimension's key (the next link reads it as it is; by join id before a repartitioned "
        "dimension, which re-keys it through a hop), with the spec's partition count (covered "
        "by the prefixed ACL); for the page's "
        "`enriched` (orders × customers × products × rates), the topics besides the tables' "
        "changelogs:\n\n"
        + _table(
            [
                u
                for u in inventory(s, resolve_all([_dimensions_example()], s.app_id))
                if u.join.startswith("enriched-")
                and not u.topic.endswith("-changelog")
                and "from the dimension before" not in u.what  # the link's writer lists it
            ]
        )
    )


def _second_join(spec: dict[str, Any]) -> dict[str, Any]:
    """Another join on ``spec``'s topics (its own name, output and ticks)."""
    return {**spec, "name": "clicks", "output": "etj-clicks", "ticks": "etj-clicks-ticks"}


def main(argv: list[str]) -> int:
    if "--print" in argv:
        s = Settings()
        print(tables(s, load_specs(s)).lstrip("\n"))
        return 0
    return generated_files.write_or_check(
        argv, lambda: {PAGE: page()}, "python -m app.docgen.topics_doc"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
