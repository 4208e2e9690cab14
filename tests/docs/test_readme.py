"""The README gives the two commands CI runs; details live in the docs site (tests/docs/test_site.py)."""

from __future__ import annotations

import re

from tests.docs.pages import README, ROOT


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = [
        line
        for line in (ROOT / ".ci/run").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith("set ")
    ]
    assert ci == ["make test"] or ci[-1].strip() in ("make test", "exec make test"), ci
    readme = README.read_text()
    assert "make test" in readme and "make run" in readme
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test", "run", "test-fast", "docs", "docs-images"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), target
