"""Every block a page marks as tested (``<!-- example: NAME -->``) is run by a test.

:data:`RUN_BY` is the list of tested blocks and the test that runs each; a marked block missing
from it, or listed here but gone from its page, fails. The small ones run here.
"""

from __future__ import annotations

import json

from app.joins.catalog import mood_spec, movie_spec
from app.joins.resolve import resolve_all
from app.settings import Settings
from tests.docs.pages import DOCS, README, ROOT, block, marked

DECLARATIVE = DOCS / "joins" / "declarative.md"

#: (page, block) -> the test that runs it (a file of tests/docs, or a path from the repository)
RUN_BY = {
    ("docs/joins/declarative.md", "joins.json"): "test_docs_example.py",
    ("docs/joins/declarative.md", "send"): "test_docs_example.py",
    ("docs/joins/declarative.md", "latest"): "test_docs_example.py",
    ("docs/joins/declarative.md", "output"): "test_docs_example.py",
    ("docs/joins/declarative.md", "validation-messages"): "test_docs_example.py",
    ("docs/concepts/revision-log.md", "retracting-fold"): "test_examples.py",
    ("docs/joins/declarative.md", "shaped-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "shaped-records"): "test_examples.py",
    ("docs/joins/declarative.md", "shaped-read"): "test_examples.py",
    ("docs/joins/declarative.md", "rekey-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "rekey-records"): "test_examples.py",
    ("docs/joins/declarative.md", "rekey-read"): "test_examples.py",
    ("docs/joins/car-zone.md", "zone-key"): "test_examples.py",
    ("docs/joins/declarative.md", "fk-spec"): "test_examples.py",
    ("docs/joins/car-zone.md", "car-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "fk-messages"): "test_examples.py",
    ("README.md", "minimal-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "hold-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "hold-scenario"): "test_examples.py",
    ("docs/joins/declarative.md", "chain-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "chain-scenario"): "test_examples.py",
    ("docs/joins/declarative.md", "chain-messages"): "test_examples.py",
    ("docs/joins/declarative.md", "dimensions-spec"): "test_examples.py",
    ("docs/joins/declarative.md", "dimensions-messages"): "test_examples.py",
    ("docs/concepts/event-time.md", "copartition-error"): "test_quoted_messages.py",
    ("docs/joins/declarative.md", "shapes-messages"): "test_quoted_messages.py",
    ("docs/operating/runbook.md", "spec-refusal"): "test_quoted_messages.py",
    ("docs/operating/runbook.md", "replay-summary"): "test_quoted_messages.py",
    ("docs/joins/declarative.md", "registry-spec"): "test_quoted_messages.py",
    ("docs/joins/declarative.md", "registry-messages"): "test_quoted_messages.py",
    ("docs/operating/postgres-sink.md", "sink-tables"): "test_postgres_sink_page.py",
    ("docs/operating/postgres-sink.md", "sink-upsert"): "test_postgres_sink_page.py",
    ("docs/operating/helm.md", "helm-joins"): "tests/deploy/test_joins_chart.py",
    # on a Spark cluster of containers: the cluster is that module's
    ("docs/batch/cluster.md", "bootstrap-on-a-cluster"): "tests/spark/test_cluster.py",
}


def runner_path(test: str) -> str:
    """The path of a :data:`RUN_BY` test from the repository."""
    return test if "/" in test else f"tests/docs/{test}"


def test_every_marked_block_is_run_by_a_test() -> None:
    found = marked()
    assert not found - set(RUN_BY), (
        f"marked as tested, but no test runs them: {found - set(RUN_BY)}"
    )
    assert not set(RUN_BY) - found, f"tested blocks gone from their pages: {set(RUN_BY) - found}"
    for test in set(RUN_BY.values()):
        assert (ROOT / runner_path(test)).exists(), test


def test_each_page_names_the_test_that_runs_its_blocks() -> None:
    for (page, _), test in RUN_BY.items():
        if page != "README.md":
            assert runner_path(test) in (ROOT / page).read_text(), (page, test)


def _run_python(page: str, name: str) -> None:
    code = block(ROOT / page, name)
    exec(compile(code, f"{page}:{name}", "exec"), {"__name__": f"example_{name}"})


def test_the_retracting_fold_runs_as_written() -> None:
    _run_python("docs/concepts/revision-log.md", "retracting-fold")


def test_the_zone_key_example_runs_as_written() -> None:
    _run_python("docs/joins/car-zone.md", "zone-key")


def test_the_readme_spec_is_valid_and_is_the_worked_example() -> None:
    spec = json.loads(block(README, "minimal-spec"))
    resolve_all([mood_spec(Settings()), movie_spec(Settings()), *spec])
    assert spec == json.loads(block(DECLARATIVE, "joins.json"))


def test_the_shaped_records_example_reads_as_the_page_says() -> None:
    """declarative.md#records-shaped-otherwise: each record read by its side's parser (nested
    paths, the ISO time, ``$timestamp``) gives the flat record or the dead letter listed."""
    from app.inputs.parsers import as_dict
    from app.inputs.records import InvalidRecord

    spec = resolve_all([json.loads(block(DECLARATIVE, "shaped-spec"))])[0]
    assert spec.events.start == "latest" and spec.dimension.start == "earliest"
    sides = {spec.events.topic: spec.events.parser(), spec.dimension.topic: spec.dimension.parser()}
    got = []
    for line in block(DECLARATIVE, "shaped-records").strip().splitlines():
        topic, key, ts, value = line.split(" ", 3)
        try:
            rec = sides[topic](key.encode(), value.encode(), None if ts == "-" else int(ts))
        except InvalidRecord as exc:
            got.append(f"dead letter: {exc}")
        else:
            got.append(json.dumps(as_dict(rec)))
    assert got == block(DECLARATIVE, "shaped-read").strip().splitlines()


def test_the_hold_example_is_valid_and_its_scenario_is_what_the_engine_answers() -> None:
    """declarative.md#a-bounded-hold-hold_ms: the spec's keys resolve (on the worked example),
    and the scenario's records replayed through the engine give the outputs listed."""
    from tests.unit.test_hold import Worker

    keys = json.loads(block(DECLARATIVE, "hold-spec"))
    [tiers] = json.loads(block(DECLARATIVE, "joins.json"))
    assert resolve_all([{**tiers, **keys}])[0].hold_ms == 5000
    w = Worker()  # the mood spec with hold_ms 50
    assert w.spec.hold_ms == 50
    for line in block(DECLARATIVE, "hold-scenario").strip().splitlines():
        record, said = (part.strip() for part in line.split("->"))
        kind, at, value = record.split()
        key, t = at.split("@")
        n = len(w.out)
        w.record("v" if kind == "mood" else "e", key, int(t), value)
        got = (
            "; ".join(
                f"{r.id} revision {r.revision} "
                f"{'null' if r.answer is None else r.answer[0]} [{r.cause}]"
                for r, _ in w.out[n:]
            )
            or "(held)"
        )
        assert got == said, line


def test_the_rekey_example_passes_records_on_as_the_page_says() -> None:
    """declarative.md#any-record-key: each record, keyed by a session or not at all, through
    the hop's rules (:mod:`app.joins.rekey`) is passed on keyed by its user id, or is the dead
    letter listed."""
    from app.inputs.records import InvalidRecord
    from app.joins.rekey import rekeyer

    spec = resolve_all([json.loads(block(DECLARATIVE, "rekey-spec"))])[0]
    assert spec.inputs[0] == spec.events.repartition == "etj-clicks-events-repartition"
    rekey = rekeyer(spec.events)
    got = []
    for line in block(DECLARATIVE, "rekey-records").strip().splitlines():
        topic, _key, value = line.split(" ", 2)
        assert topic == spec.events.topic
        try:
            key, _time = rekey(value.encode(), None)
        except InvalidRecord as exc:
            got.append(f"dead letter: {exc}")
        else:
            got.append(f"{spec.events.repartition} {key.decode()}")
    assert got == block(DECLARATIVE, "rekey-read").strip().splitlines()


def test_the_chain_example_resolves_replays_and_refuses_as_the_page_says() -> None:
    """declarative.md#joins-that-feed-joins: the two specs resolve, the first one's revisions
    (and prices) replayed through the second one's rules give the outputs listed, and each
    mistake gives the message quoted."""
    import copy

    from app.joins.spec import SpecError
    from app.logic.event_join import KeyState, add_event, add_version

    raws = json.loads(block(DECLARATIVE, "chain-spec"))
    tiers, priced = resolve_all(raws)
    assert priced.events.topic == tiers.output and priced.order_field == "revision"
    parse = {
        priced.events.topic: priced.events.parser(check_key=False),
        priced.dimension.topic: priced.dimension.parser(check_key=False),
    }
    state, got = KeyState(), []
    for line in block(DECLARATIVE, "chain-scenario").strip().splitlines():
        record, said = (part.strip() for part in line.split(" -> "))
        topic, value = record.split(" ", 1)
        rec = parse[topic](None, value.encode())
        if topic == priced.events.topic:
            _, revs = add_event(priced.rules, state, priced.event_of(rec))
        else:
            v = priced.version_of(rec)
            _, revs = add_version(priced.rules, state, rec.product, v)
        out = [priced.to_wire(r) for r in revs]
        got.append(
            "; ".join(
                f"{w['id']} revision {w['revision']}: tier {w['tier'] or 'null'}, "
                f"price {w['price']} [{w['cause']}]"
                for w in out
            )
            or "(none)"
        )
        assert got[-1] == said, line

    def mistake(*changes: tuple[int, str, object]) -> str:
        raw = copy.deepcopy(raws)
        for i, path, value in changes:
            *parents, leaf = path.split(".")
            node = raw[i]
            for p in parents:
                node = node[p]
            if value is ...:
                del node[leaf]
            else:
                node[leaf] = value
        try:
            resolve_all(raw)
        except SpecError as exc:
            return str(exc)
        raise AssertionError(f"not refused: {changes}")

    said = [
        mistake((0, "events.topic", "etj-orders-priced")),
        mistake((1, "events.id", ...)),
        mistake((1, "events.fields.cause", "str"), (1, "events.key", "cause")),
        mistake((1, "events.time", "$timestamp")),
        mistake((1, "retention_ms", 3600000)),
    ]
    assert said == block(DECLARATIVE, "chain-messages").strip().splitlines()


def test_the_foreign_key_example_resolves_and_its_mistakes_say_what_the_page_says() -> None:
    """declarative.md#foreign-key-joins: the spec resolves with the output fields the page
    lists, and each mistake gives the message quoted there."""
    from app.joins.fk_spec import resolve_fk
    from app.joins.spec import SpecError

    raw = json.loads(block(DECLARATIVE, "fk-spec"))
    spec = resolve_fk(raw, 0)
    assert spec.output_fields == (
        "order_id",
        "customer_id",
        "amount",
        "region",
        "order_time",
        "region_time",
    )
    assert spec.describe()["kind"] == "foreign-key"
    assert spec.describe()["left"]["foreign_key"] == "customer_id"

    def broken(edit) -> str:
        bad = json.loads(json.dumps(raw))
        edit(bad)
        try:
            resolve_fk(bad, 0)
        except SpecError as exc:
            return f"app.joins.spec.SpecError: {exc}"
        raise AssertionError("accepted")

    def int_fk(s):
        s["left"]["fields"]["customer.id"] = "int"

    got = [
        broken(lambda s: s["left"].pop("foreign_key")),
        broken(lambda s: s["left"].update(foreign_key="customer")),
        broken(int_fk),
        broken(lambda s: s["right"].pop("time_as")),
        broken(lambda s: s.update(kind="fk")),
    ]
    assert got == block(DECLARATIVE, "fk-messages").strip().splitlines()


def test_the_car_spec_on_the_page_is_the_built_in_one() -> None:
    """car-zone.md: the car join is the foreign-key spec shown, with the default settings."""
    from app.joins.catalog import car_spec

    assert json.loads(block(DOCS / "joins" / "car-zone.md", "car-spec")) == car_spec(Settings())


def test_the_several_dimensions_example_resolves_and_its_mistakes_say_what_the_page_says():
    """declarative.md#several-dimensions: the spec resolves into its three links, with the
    output the page lists, and each mistake gives the message quoted there."""
    import copy

    from app.joins.spec import SpecError

    raw = json.loads(block(DECLARATIVE, "dimensions-spec"))
    c, p, r = resolve_all([raw])
    assert [s.name for s in (c, p, r)] == [
        "enriched-customer",
        "enriched-product",
        "enriched-currency",
    ]
    assert (c.output, p.events.topic, p.output, r.events.topic, r.output) == (
        "etj-enriched-customer-link",
        "etj-enriched-customer-link",
        "etj-enriched-product-link",
        "etj-enriched-product-link",
        "etj-orders-enriched",
    )
    assert (c.events.key, p.events.key, r.events.key) == ("customer", "product", "currency")
    assert (p.mode, r.asof) == ("inner", "at-or-before-else-earliest")
    assert r.output_fields == (
        "id",
        "amount",
        *("tier", "previous_tier", "tier_time", "price", "previous_price", "price_time"),
        *("customer_cause", "product_cause", "rate", "rate_time"),
        *("revision", "previous_rate", "cause", "dimension"),
    )

    def mistake(**changes: object) -> str:
        bad = copy.deepcopy(raw)
        for path, value in changes.items():
            *parents, leaf = path.split("__")
            node = bad
            for part in parents:
                node = node[part]
            if value is ...:
                del node[leaf]
            else:
                node[leaf] = value
        try:
            resolve_all([bad])
        except SpecError as exc:
            return str(exc)
        raise AssertionError(f"not refused: {changes}")

    said = [
        mistake(finality=True),
        mistake(emit="final"),
        mistake(hold_ms=1000),
        mistake(events__id=...),
        mistake(name="enriched-orders-of-every-customer"),
    ]
    assert said == block(DECLARATIVE, "dimensions-messages").strip().splitlines()
