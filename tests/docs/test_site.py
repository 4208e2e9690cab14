"""The docs site builds strictly, and the README's links land on pages and headings that exist.

``mkdocs build --strict`` (mkdocs.yml turns every link, anchor and omitted-page check into a
warning, and --strict makes a warning fail the build) into a temporary directory: nothing in the
repository is written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import markdown

from tests.docs.pages import DOCS, README, ROOT


def test_mkdocs_build_strict_passes(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # material's notice about its successor
    assert done.returncode == 0, done.stderr[-5000:]
    assert not re.search(r"^WARNING\b", done.stderr, re.M), done.stderr[-5000:]
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "operating" / "settings" / "index.html").exists()


def _anchors(page) -> set[str]:
    """The heading ids mkdocs gives a page (Python-Markdown's toc extension, like mkdocs)."""
    md = markdown.Markdown(extensions=["toc", "tables", "attr_list", "admonition"])
    md.convert(page.read_text(encoding="utf-8"))
    out: set[str] = set()

    def walk(tokens):
        for t in tokens:
            out.add(t["id"])
            walk(t["children"])

    walk(md.toc_tokens)
    return out


def test_the_readme_links_land_on_existing_pages_and_headings():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links into the docs"
    for link in local:
        path, _, anchor = link.partition("#")
        target = (ROOT / path).resolve()
        assert target.exists(), f"README links to {link}: no such file"
        assert target.is_relative_to(DOCS), f"README links to {link}: not a docs page"
        if anchor:
            assert anchor in _anchors(target), f"README links to {link}: no such heading"


def test_the_readme_stays_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


#: where code points readers into the docs (``docs/<page>.md#<anchor>`` in a comment or docstring)
CODE_GLOBS = (
    "app/**/*.py",
    "tests/**/*.py",
    "bench/**/*.py",
    "Makefile",
    "Dockerfile",
    "helm/etj/values.yaml",
    "helm/etj/templates/*",
    "pyproject.toml",
    "mkdocs.yml",
)
DOC_REF = re.compile(r"docs/((?:[\w.-]+/)*[\w.-]+\.md)(?:#([\w-]+))?")


def test_references_from_the_code_land_on_existing_pages_and_headings():
    bad = []
    for pattern in CODE_GLOBS:
        for path in ROOT.glob(pattern):
            for page, anchor in DOC_REF.findall(path.read_text(encoding="utf-8", errors="replace")):
                target = DOCS / page
                if not target.exists():
                    bad.append(f"{path.relative_to(ROOT)}: docs/{page} does not exist")
                elif anchor and anchor not in _anchors(target):
                    bad.append(f"{path.relative_to(ROOT)}: docs/{page} has no heading #{anchor}")
    assert not bad, "\n".join(bad)
