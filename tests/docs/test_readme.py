"""The README is the user's manual: it must list every setting and the two commands CI runs."""

from __future__ import annotations

import re
from pathlib import Path

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_readme_table_with_its_default() -> None:
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| `(ETJ_[A-Z0-9_]+)` \| ([^|]+) \|", README, re.MULTILINE)}
    for name, field in Settings.model_fields.items():
        env = "ETJ_" + name.upper()
        assert env in rows, f"{env} missing from the README's settings table"
        default = "unset" if field.default is None else f"`{field.default}`"
        assert rows[env].strip() == default, f"{env}: README says {rows[env]!r}, code {default!r}"
    unknown = set(rows) - {"ETJ_" + n.upper() for n in Settings.model_fields}
    assert not unknown, f"README documents settings the code does not have: {unknown}"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith("set ")]
    assert ci == ["make test"] or ci[-1].strip() in ("make test", "exec make test"), ci
    assert "make test" in README and "make run" in README
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:", makefile, re.MULTILINE)
    assert re.search(r"^run:", makefile, re.MULTILINE)
