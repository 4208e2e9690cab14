"""docs/contributing/architecture.md is true to the tree of app/: every ``app/`` path it names
exists, and every package and module of app/ is named on it — by its path, or a module as
``name.py`` on a line that names its package (a row of the modules table). A module added,
moved or renamed without the page fails here, and so does a page that names a module gone.

Also: app/'s root holds the app's wiring only, at most :data:`ROOT_MODULES` modules; everything
else lives in a package named for what a record meets.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.pages import DOCS, ROOT

PAGE = DOCS / "contributing" / "architecture.md"
APP = ROOT / "app"
#: app/'s own modules at most, ``__init__.py`` included
ROOT_MODULES = 8
#: ``app/…/`` (a package or a folder) or ``app/…/x.py``
APP_PATH = re.compile(r"(?<![\w/.-])(app/(?:[\w-]+/)*(?:[\w-]+\.py)?)")
#: a module named without its package: ```x.py```
BARE = re.compile(r"`(\w+\.py)`")


def app_tree(root: Path = APP) -> set[str]:
    """Every package (``app/x/``) and module (``app/x/y.py``) of app/; ``__init__.py`` and
    ``__main__.py`` are their package's."""
    out = set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root.parent).as_posix()
        if path.name in ("__init__.py", "__main__.py"):
            out.add(rel.rpartition("/")[0] + "/")
        else:
            out.add(rel)
    return out


def named(text: str, root: Path = ROOT) -> tuple[set[str], list[str]]:
    """(the app/ paths the page names, what it names that is not there)."""
    found: set[str] = set()
    missing: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        paths = APP_PATH.findall(line)
        for path in paths:
            if (root / path).exists():
                found.add(path)
            else:
                missing.append(f"line {n}: {path}")
        packages = {p if p.endswith("/") else p.rpartition("/")[0] + "/" for p in paths}
        for bare in sorted(set(BARE.findall(line))):
            homes = [pkg + bare for pkg in packages if (root / pkg / bare).is_file()]
            if packages and not homes:
                missing.append(f"line {n}: {bare} (in none of {', '.join(sorted(packages))})")
            found.update(homes)
    return found, missing


def test_every_app_path_the_page_names_exists():
    found, missing = named(PAGE.read_text(encoding="utf-8"))
    assert "app/loop/durable.py" in found  # the page is read at all
    assert missing == [], "the architecture page names what app/ no longer has:\n" + "\n".join(
        missing
    )


def test_every_package_and_module_of_app_is_on_the_page():
    found, _ = named(PAGE.read_text(encoding="utf-8"))
    absent = sorted(app_tree() - found)
    assert absent == [], (
        "not on docs/contributing/architecture.md (add each where a record "
        "meets it):\n" + "\n".join(absent)
    )


def test_the_root_of_app_holds_the_wiring_only():
    modules = sorted(p.name for p in APP.glob("*.py"))
    assert len(modules) <= ROOT_MODULES, f"app/ holds {len(modules)} modules: {modules}"


def test_the_check_fails_on_a_module_the_page_does_not_name_or_one_gone(tmp_path):
    for rel in (
        "app/__init__.py",
        "app/main.py",
        "app/loop/__init__.py",
        "app/loop/durable.py",
        "app/loop/intake.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    page = "`app/`: `app/main.py`\n| `app/loop/` | `durable.py`, `intake.py` |\n"
    found, missing = named(page, tmp_path)
    assert missing == [] and app_tree(tmp_path / "app") == found
    (tmp_path / "app/loop/pipeline.py").write_text("")  # a module the page does not name
    assert app_tree(tmp_path / "app") - named(page, tmp_path)[0] == {"app/loop/pipeline.py"}
    page += "`app/loop/acks.py`, and in its row `types.py`: | `app/loop/` | `types.py` |\n"
    assert named(page, tmp_path)[1] == [
        "line 3: app/loop/acks.py",
        "line 3: types.py (in none of app/loop/)",
    ]
