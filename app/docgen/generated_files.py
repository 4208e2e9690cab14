"""Pages the code writes (the settings page, the Helm schema and values page, the patches page,
the topics page): each generator's ``--check`` and write, in one place.

Each generator is ``python -m <module>``: with no argument it writes its files; with
``--check`` it writes nothing and exits 1 naming each file that differs from what the code
gives (a test per page holds the same comparison).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

__all__ = ["ROOT", "stale", "write_or_check"]

ROOT = Path(__file__).resolve().parents[2]


def stale(files: dict[Path, str]) -> list[Path]:
    """The files whose content differs from what the code gives (``files``: path -> text)."""
    return [
        path
        for path, text in files.items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def write_or_check(argv: list[str], files: Callable[[], dict[Path, str]], command: str) -> int:
    """``--check``: report each stale file, exit status 1 if any; otherwise write them all.
    ``command``: how to regenerate, for the report."""
    if "--check" in argv:
        old = stale(files())
        for path in old:
            print(f"stale: {path.relative_to(ROOT)} (run `{command}`)")
        return 1 if old else 0
    for path, text in files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0
