"""Instructions per record of the worker's own code (``bench.kernel``), counted by callgrind:
a figure that does not move with the machine's load, for A/B comparisons on a shared machine.

``python -m bench.instructions [--records N] [kernel options]`` runs ``python -m bench.kernel
--callgrind`` under ``valgrind --tool=callgrind --instr-atstart=no``: only the instructions
executed while the records are handled are counted (the kernel calls the two functions of a
marker library, built here with gcc from valgrind's ``callgrind.h``, around its handling; the
workload's generation, the imports and the set-up are not counted). Prints instructions per
record (``Ir``) and the kernel's own line. Needs valgrind and its headers (Debian:
``valgrind``); ~60x slower than the kernel alone, so a few thousand records.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "var" / "bench" / "callgrind-marker-v2.so"
SOURCE = r"""
#include <valgrind/callgrind.h>
void etj_marker_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void etj_marker_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


def marker_library() -> Path:
    """The marker library (built once): two functions the kernel calls around its handling."""
    if not LIB.exists():
        LIB.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            c = Path(tmp) / "marker.c"
            c.write_text(SOURCE)
            subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(LIB), str(c)], check=True)
    return LIB


def count(kernel_args: list[str]) -> dict[str, float]:
    marker_library()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={tmp}/callgrind.out",
                sys.executable,
                "-m",
                "bench.kernel",
                "--callgrind",
                "--json",
                *kernel_args,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # instrumentation is on only between the marker's calls: what it collected is theirs
    m = re.search(r"Collected : (\d+)", proc.stderr)
    ir = int(m.group(1)) if m else 0
    n = max(result["handled"], 1)
    return {"records": result["handled"], "instructions": ir, "per_record": ir / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=6_000)
    args, rest = ap.parse_known_args()
    if "--catalogue" not in rest:
        rest = ["--records", str(args.records), *rest]
    r = count(rest)
    print(
        f"{r['records']} records: {r['instructions']:,} instructions, "
        f"{r['per_record']:,.0f} per record (callgrind Ir)"
    )


if __name__ == "__main__":
    main()
