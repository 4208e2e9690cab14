"""Reading the docs as tests see them: the pages, and the blocks they mark as tested.

A page marks a fenced block as tested with ``<!-- example: NAME -->`` on the line before it; a
test reads the block with :func:`block` and runs it as written.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

MARKER = re.compile(r"<!-- example: ([^ ]+) -->\s*```[a-z]*\n(.*?)```", re.S)


def pages() -> list[Path]:
    """The README and every page of the site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def block(page: Path, name: str) -> str:
    """The fenced block right after ``<!-- example: name -->`` on ``page``."""
    for found, text in MARKER.findall(page.read_text(encoding="utf-8")):
        if found == name:
            return text
    raise AssertionError(f"{page.relative_to(ROOT)} has no '{name}' example block")


def marked() -> set[tuple[str, str]]:
    """(page relative to the repository, block name) of every tested block."""
    return {
        (page.relative_to(ROOT).as_posix(), name)
        for page in pages()
        for name, _ in MARKER.findall(page.read_text(encoding="utf-8"))
    }
