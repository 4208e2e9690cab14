"""app.compat.upstream and app.compat.upstream_audit: each patch names the upstream code it
replaces and the hash of the source it was written against, describes itself in a fixed
docstring form, and the patches page is made from those docstrings.

The last four tests are the checks an upgrade relies on (``make compat-check`` runs them with
another release): every upstream unchanged, every docstring in the form, the page fresh, every
replacement of upstream code registered.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import textwrap

import pytest
from aiokafka.consumer.fetcher import FetchResult

from app.compat import release_check, upstream, upstream_audit
from app.compat.upstream import (
    Change,
    changed,
    replaces,
    upstream_hash,
    upstream_source,
)
from app.compat.upstream_audit import doc_problems, missing_tests, parse_doc, unregistered
from app.docgen import patches_doc

GETALL = "aiokafka.consumer.fetcher:FetchResult.getall"

#: ``module:qualname`` of code in app/compat that overrides or assigns upstream code but is not a
#: patch (a hook upstream asks subclasses to fill in, say) -> why. Empty until one is argued.
EXEMPT: dict[str, str] = {}

COMPLETE = """Note the offsets aiokafka moved past.

Upstream: aiokafka reads past offsets the log does not hold without saying so.
Symptom: a jump between two records was taken for a gap,
and records never handed over were committed.
Test: tests/unit/test_log_gaps.py::test_a_fetch_notes_the_offsets_the_log_does_not_hold
Remove when: aiokafka reports the offsets it reads past.
"""


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> list[upstream.Patch]:
    """The registry as it is, plus what a test registers; put back afterwards."""
    upstream.load()
    registry = list(upstream._REGISTRY)
    monkeypatch.setattr(upstream, "_REGISTRY", registry)
    return registry


# -- the upstream source and its hash ---------------------------------------------------------


def test_a_known_upstream_function_resolves_and_hashes():
    source = upstream_source(GETALL)
    assert source.startswith("def getall(self, max_records=None):\n")
    # the method as aiokafka's file has it, dedented
    assert textwrap.indent(source, "    ") in inspect.getsource(sys.modules[FetchResult.__module__])
    assert source.endswith("\n") and "\r" not in source and not source.startswith(" ")
    digest = upstream_hash(GETALL)
    assert digest == hashlib.sha256(source.encode()).hexdigest()[:12]
    assert len(digest) == 12 and int(digest, 16) >= 0


def test_a_patch_installed_in_the_process_does_not_hide_upstream(monkeypatch):
    before = upstream_hash(GETALL)

    def getall(self, max_records=None):  # what a patch would assign
        return []

    monkeypatch.setattr(FetchResult, "getall", getall)
    assert upstream_hash(GETALL) == before
    assert "ret_list" in upstream_source(GETALL)  # upstream's body, not the patch's


def test_properties_service_tasks_and_inherited_methods_resolve():
    assert upstream_source("faust.transport.drivers.aiokafka:Producer._producer_type").startswith(
        "@property\ndef _producer_type(self)"
    )
    assert upstream_source("faust.tables.recovery:Recovery._slurp_changelogs").startswith(
        "@Service.task\nasync def _slurp_changelogs(self)"
    )
    # the driver's Consumer inherits _new_offset from faust.transport.consumer.Consumer
    assert upstream_source(
        "faust.transport.drivers.aiokafka:Consumer._new_offset"
    ) == upstream_source("faust.transport.consumer:Consumer._new_offset")
    # a whole class, and one a package re-exports
    assert upstream_source("aiokafka:AIOKafkaConsumer").startswith("class AIOKafkaConsumer")


@pytest.mark.parametrize(
    "target",
    [
        "aiokafka.no_such_module:X.y",
        "aiokafka.consumer.fetcher:NoSuchClass.getall",
        "aiokafka.consumer.fetcher:FetchResult.no_such_method",
    ],
)
def test_a_target_that_does_not_resolve_raises(target):
    with pytest.raises((ImportError, AttributeError, LookupError)):
        upstream_hash(target)


# -- the decorator and changed() --------------------------------------------------------------


def test_the_decorator_records_and_returns_the_object_unchanged(scratch_registry):
    def getall(self, max_records=None):
        return []

    assert replaces(GETALL, "0123456789ab")(getall) is getall

    @replaces(
        ("faust.transport.consumer:Consumer._new_offset", "0123456789ab"),
        ("faust.transport.consumer:Consumer.ack", "ba9876543210"),
    )
    class Copy:
        @property
        @replaces("faust.transport.drivers.aiokafka:Producer._producer_type", "0123456789ab")
        def _producer_type(self):
            return None

    ours = [p for p in scratch_registry if p.module == __name__]
    assert {(p.qualname.rpartition("<locals>.")[2], p.target) for p in ours} == {
        ("getall", GETALL),
        ("Copy", "faust.transport.consumer:Consumer._new_offset"),
        ("Copy", "faust.transport.consumer:Consumer.ack"),
        ("Copy._producer_type", "faust.transport.drivers.aiokafka:Producer._producer_type"),
    }
    assert isinstance(vars(Copy)["_producer_type"], property)
    assert all(p.name == f"{__name__}:{p.qualname}" for p in ours)


@pytest.mark.parametrize(
    "args",
    [
        ("aiokafka.consumer.fetcher.FetchResult.getall", "0123456789ab"),
        (GETALL, "0123456789"),
        (GETALL, "0123456789AB"),
        (GETALL,),
        ((GETALL, "0123456789ab"), GETALL),
    ],
)
def test_the_decorator_refuses_a_malformed_target_or_hash(args):
    with pytest.raises((TypeError, ValueError)):
        replaces(*args)


def test_a_patch_made_inside_a_function_of_app_is_refused(scratch_registry):
    def highwaters(self, partitions):
        pass

    highwaters.__module__ = "app.compat.end_offsets"  # as if made by its install()
    with pytest.raises(TypeError, match="module-level"):
        replaces(
            "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters", "0123456789ab"
        )(highwaters)


def test_changed_names_a_patch_whose_upstream_is_not_what_it_recorded(scratch_registry):
    @replaces(GETALL, "000000000000")
    def stale_getall(self, max_records=None):
        """A throwaway patch with a wrong hash."""

    @replaces(GETALL, upstream_hash(GETALL))
    def fresh_getall(self, max_records=None):
        """A throwaway patch with the right one."""

    @replaces("aiokafka.consumer.fetcher:FetchResult.gone_in_this_release", "000000000000")
    def gone(self):
        """A throwaway patch of something upstream no longer has."""

    ours = {c.patch.rpartition(".")[2]: c for c in changed() if c.patch.startswith(__name__)}
    assert set(ours) == {"stale_getall", "gone"}
    stale = ours["stale_getall"]
    assert stale == Change(
        f"{__name__}:{stale_getall.__qualname__}", GETALL, "000000000000", upstream_hash(GETALL)
    )
    assert ours["gone"].now.startswith("missing: AttributeError")


def test_the_command_names_a_changed_patch_and_fails(scratch_registry, capsys):
    @replaces(GETALL, "000000000000")
    def stale_getall(self, max_records=None):
        """A throwaway patch with a wrong hash."""

    assert upstream_audit.main([]) == 1
    out = capsys.readouterr().out
    assert f"CHANGED  {__name__}:{stale_getall.__qualname__}  replaces {GETALL}" in out
    assert "installed: faust-streaming " in out
    assert upstream_audit.main(["--hash", GETALL]) == 0
    assert capsys.readouterr().out == f'@replaces("{GETALL}", "{upstream_hash(GETALL)}")\n'


# -- the docstring form -----------------------------------------------------------------------


def test_a_docstring_in_the_form_parses_into_its_sections():
    doc = parse_doc(COMPLETE)
    assert doc.problems == ()
    assert doc.text == "Note the offsets aiokafka moved past."
    assert list(doc.sections) == list(upstream_audit.SECTIONS)
    assert doc.sections["Symptom"] == (
        "a jump between two records was taken for a gap, and "
        "records never handed over were committed."
    )
    assert doc.tests == [
        ("tests/unit/test_log_gaps.py", "test_a_fetch_notes_the_offsets_the_log_does_not_hold")
    ]
    assert missing_tests(doc) == []


@pytest.mark.parametrize("section", upstream_audit.SECTIONS)
def test_the_form_rejects_a_docstring_missing_a_section(section):
    doc = "\n".join(
        line
        for line in COMPLETE.splitlines()
        if not line.startswith(section + ":")
        and not (section == "Symptom" and line.startswith("and records"))
    )
    assert f"no '{section}:' section" in parse_doc(doc).problems


def test_the_form_rejects_an_empty_section_a_section_twice_and_the_wrong_order():
    assert (
        "'Symptom:' is empty"
        in parse_doc(
            COMPLETE.replace(
                "Symptom: a jump between two records was taken for a gap,\n"
                "and records never handed over were committed.",
                "Symptom:",
            )
        ).problems
    )
    assert "'Upstream:' twice" in parse_doc(COMPLETE + "Upstream: again.\n").problems
    swapped = (
        COMPLETE.replace("Upstream:", "@@")
        .replace("Remove when:", "Upstream:")
        .replace("@@", "Remove when:")
    )
    assert any("out of order" in p for p in parse_doc(swapped).problems)
    assert "no 'Upstream:' section" in parse_doc(None).problems


def test_the_form_wants_the_tests_named_and_there(tmp_path):
    vague = parse_doc(
        COMPLETE.replace(
            "tests/unit/test_log_gaps.py::test_a_fetch_notes_the_offsets_the_log_does_not_hold",
            "the broker tests",
        )
    )
    assert any("names no test" in p for p in vague.problems)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("async def test_y():\n    pass\n")
    doc = parse_doc(
        COMPLETE.replace("tests/unit/test_log_gaps.py", "tests/test_x.py").replace(
            "test_a_fetch_notes_the_offsets_the_log_does_not_hold",
            "test_y, tests/test_x.py::test_z and tests/test_w.py::test_y",
        )
    )
    assert doc.problems == ()
    assert missing_tests(doc, tmp_path) == [
        "tests/test_x.py::test_z: no function test_z in that file",
        "tests/test_w.py: no such file",
    ]


def test_a_patch_is_judged_by_its_own_docstring_not_the_one_it_overrides():
    class Override(FetchResult):
        def getall(self, max_records=None):  # no docstring; upstream's has none either
            return []

    assert doc_problems(Override.getall)[:1] == ["no 'Upstream:' section"]

    def documented():
        pass

    documented.__doc__ = COMPLETE
    assert doc_problems(documented) == []


# -- the patches page -------------------------------------------------------------------------


def test_the_page_describes_a_registered_patch(scratch_registry):
    module = patches_doc.compat_modules()[0]

    def throwaway_getall(self, max_records=None):
        pass

    throwaway_getall.__doc__ = COMPLETE
    throwaway_getall.__module__ = module  # as if it were defined there, at module level
    throwaway_getall.__qualname__ = "throwaway_getall"
    replaces(GETALL, "0123456789ab")(throwaway_getall)
    page = patches_doc.page()
    file = module.rpartition(".")[2] + ".py"
    assert f"### `{file}`" in page and "#### `throwaway_getall`" in page
    assert f"- **Replaces**: `{GETALL}` (`0123456789ab`)" in page
    assert f"| `{file}` | `throwaway_getall` | monkeypatch |" in page
    assert "**Monkeypatches**" in page
    assert "- **Remove when**: aiokafka reports the offsets it reads past." in page
    assert "## Moving to a new release" in page and "make compat-check" in page


def test_compat_check_replaces_only_the_pins_it_is_given():
    reqs = release_check.requirements(["aiokafka==0.13.0", "Faust_Streaming>=0.11"])
    assert "aiokafka==0.13.0" in reqs and "aiokafka==0.14.0" not in reqs
    assert "Faust_Streaming>=0.11" in reqs and "faust-streaming==0.15.3" not in reqs
    assert any(r.startswith("pytest") for r in reqs)  # the test extra
    assert any(r.startswith("pyarrow") for r in reqs)  # the batch extra (the archive's tests)
    assert any(r.startswith("orjson") for r in reqs)  # the other pins, as they are


# -- the checks an upgrade relies on ----------------------------------------------------------


def test_every_patch_upstream_is_unchanged():
    """Fails with another faust-streaming or aiokafka: each line names a patch to re-read against
    the new source, then give the new hash (python -m app.compat.upstream_audit --hash TARGET)."""
    changes = changed()
    assert changes == [], "upstream changed under these patches:\n" + "\n".join(
        f"  {c.patch} replaces {c.target}: written against {c.recorded or '-'}, now {c.now}"
        for c in changes
    )


def test_every_patch_docstring_has_the_four_sections():
    bad = {
        name: doc_problems(obj)
        for name, obj in upstream_audit.patch_objects().items()
        if name.startswith("app.compat.")
    }
    bad = {name: problems for name, problems in bad.items() if problems}
    assert bad == {}, (
        "patch docstrings out of the form (Upstream:, Symptom:, Test:, "
        "Remove when:):\n" + "\n".join(f"  {n}: {'; '.join(p)}" for n, p in bad.items())
    )


def test_patches_doc_is_fresh():
    want = patches_doc.page()
    have = patches_doc.PAGE.read_text(encoding="utf-8") if patches_doc.PAGE.exists() else ""
    assert have == want, (
        "docs/contributing/patches.md is stale: run "
        "`python -m app.docgen.patches_doc` and commit what it wrote"
    )


def test_the_registration_check_sees_assignments_and_overrides(monkeypatch):
    """With nothing registered, the check below names both kinds (it is not vacuous)."""
    upstream.load()
    monkeypatch.setattr(upstream, "_REGISTRY", [])
    found = unregistered()
    assert any(" = …: " in line for line in found), found
    assert any(" overrides " in line for line in found), found


def test_every_compat_patch_is_registered():
    """Every ``UpstreamClass.attr = …`` in app/compat (of an attribute upstream defines) and every
    override of an upstream method by a subclass in app/compat carries ``@replaces``."""
    missing = unregistered(EXEMPT)
    assert missing == [], (
        "replacing upstream code without @replaces (so an upgrade cannot "
        "say whether it still fits):\n  " + "\n  ".join(missing)
    )
