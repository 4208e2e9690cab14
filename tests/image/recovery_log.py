"""How much changelog a worker replayed, read from Faust's own recovery log.

Faust logs two tables at each recovery (``faust/tables/recovery.py``): the highwater (last
offset) of each active changelog partition, and the offset its reading starts at: the offset
the table partition's RocksDB database holds (kept on the volume, or installed from a snapshot),
``-1`` when there is none. ``highwater - start`` records are replayed; ``highwater + 1`` would be
a full replay. That is how the tier tells recovery from kept state or a snapshot from a replay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TP = tuple[str, int]

_TABLE_ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*(\d+)\s*\|\s*(-?\d+)\s*\|$")
_DITTO = "\u3003"
#: app.state.snapshot_service
RESTORED = re.compile(r"restored (\S+)\[(\d+)\] from snapshot \S+ \(offset (\d+)")
#: app.state.crash_marker, after an unclean stop
DISCARDED = "did not stop cleanly"


def _table(lines: list[str], at: int) -> dict[TP, int]:
    out: dict[TP, int] = {}
    topic = ""
    for line in lines[at + 1 :]:
        if line.startswith("+"):
            continue
        m = _TABLE_ROW.match(line.strip())
        if not m:
            if line.startswith("|"):  # the header row
                continue
            break
        topic = topic if m.group(1) == _DITTO else m.group(1)
        out[(topic, int(m.group(2)))] = int(m.group(3))
    return out


@dataclass(frozen=True)
class Recovery:
    """One recovery of a worker's active table partitions."""

    highwater: dict[TP, int]
    start: dict[TP, int]

    def replayed(self, tp: TP) -> int:
        return max(0, self.highwater[tp] - self.start.get(tp, -1))

    @property
    def replayed_total(self) -> int:
        return sum(self.replayed(tp) for tp in self.highwater)

    @property
    def full_replay_total(self) -> int:
        return sum(hw + 1 for hw in self.highwater.values())

    @property
    def from_state(self) -> set[TP]:
        """Partitions with records whose reading started from a database (not from zero)."""
        return {tp for tp, hw in self.highwater.items() if hw >= 0 and self.start.get(tp, -1) >= 0}


def recoveries(log: str) -> list[Recovery]:
    """Every recovery in ``log``, in order."""
    lines = log.splitlines()
    out = []
    highwater: dict[TP, int] | None = None
    for i, line in enumerate(lines):
        if "Highwater for active changelog partitions" in line:
            highwater = _table(lines, i)
        elif "active offsets at start of reading" in line and highwater is not None:
            out.append(Recovery(highwater, _table(lines, i)))
            highwater = None
    return out


def first_readings(log: str) -> Recovery:
    """Each partition's first recovery in ``log``, all of them together: what a worker read
    for the partitions it was given, rebalance after rebalance (a restarted pod is given some
    at once, the rest when the killed member's session expires)."""
    highwater: dict[TP, int] = {}
    start: dict[TP, int] = {}
    for r in recoveries(log):
        for tp, hw in r.highwater.items():
            if tp not in highwater:
                highwater[tp] = hw
                start[tp] = r.start.get(tp, -1)
    return Recovery(highwater, start)


def settled(log: str) -> bool:
    """The worker's latest recovery is over: a "Worker ready" after its highwater table."""
    return log.rfind("Worker ready") > log.rfind("Highwater for active changelog partitions")


def restored(log: str) -> dict[TP, int]:
    """(changelog topic, partition) -> the offset of the snapshot it was restored from."""
    return {(t, int(p)): int(o) for t, p, o in RESTORED.findall(log)}
