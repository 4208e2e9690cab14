"""`make test`'s two xdist workers keep a group on one of them (tests/conftest.py: the image
tier shares one Docker engine, made and stopped by whichever worker runs it).

pytest 9 keeps a node's id in ``_id``; pytest-xdist 3.8's ``--dist loadgroup`` writes the group
into ``_nodeid``, so with pytest 9 the groups were split over both workers without a word: two
of them could start dockerd at once, or one stop it under the other. Hence ``pytest<9`` in the
test extra, and this check, which fails the day a release splits groups again.
"""

from __future__ import annotations

import re
import subprocess
import sys


def test_a_group_runs_on_one_worker(tmp_path):
    for name, n in (("a", 6), ("b", 4)):
        (tmp_path / f"test_{name}.py").write_text(
            "import pytest\n"
            "@pytest.mark.xdist_group('g')\n"
            f"@pytest.mark.parametrize('i', range({n}))\n"
            f"def test_grouped_{name}(i): pass\n"
            f"@pytest.mark.parametrize('i', range({n}))\n"
            f"def test_free_{name}(i): pass\n"
        )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    grouped = re.findall(r"\[(gw\d)\].*PASSED .*::test_grouped_", done.stdout)
    assert len(grouped) == 10, done.stdout[-3000:]
    assert len(set(grouped)) == 1, f"a group split over workers: {grouped}"
