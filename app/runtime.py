"""The process the worker runs in: its event loop and its garbage collector, set by
:mod:`app.main` before ``faust worker`` makes its loop, and how it ends when a record is lost.

**The event loop** (:func:`use_event_loop`): uvloop unless ``ETJ_EVENT_LOOP=asyncio``.

Why: a worker's main thread is CPU-bound on Faust's per-record path, and most of that path is
event-loop work — mode's ``wait_first`` makes four tasks and an ``asyncio.wait`` per fetched
record, every produce is a future with callbacks, every agent step a ``call_soon``. uvloop runs
the loop, its handles and its sockets in C. Measured on the ``throughput`` backlog (10,000
records, 2 cores, two interleaved runs each): one-record batches 2,745–2,860 → 3,334–3,439
records/s, default batching 6,954–7,013 → 7,837–7,930 records/s (docs/contributing/performance-log.md).

faust-streaming 0.15.3 parses ``faust -L uvloop`` but never applies it, so the choice is made
here, before the CLI creates the loop (``app.main`` is imported first). A loop already running
(a test's) is left alone: the policy only decides the loops made after it.

**The garbage collector** (:func:`use_gc_thresholds`): its cyclic collections run less often than
CPython's default.

Why: a worker builds large, long-lived tables in memory (a memory store's rows are lists and
dicts, all tracked by the collector) and allocates a few short-lived containers per record.
CPython 3.11's default thresholds (700, 10, 10) collect the youngest generation every 700
allocations and traverse the older ones often enough that, while a 1M-key table was replayed,
``gc_collect_main`` was 15 % of the main thread (py-spy ``--native``) — and replay is bound by
that thread. Table rows form no reference cycles: they are freed by reference counting when
replaced or deleted, whatever the thresholds; only cyclic garbage (asyncio's futures and
exceptions, mostly) waits longer for a collection, in a generation 0 of at most
:data:`GC_THRESHOLDS`'s first figure.

Measured (2 cores, ``bench.recovery``'s 1M-key changelog, process start to ready): 26.6 s with
the default thresholds, 23.5 s with these, 22.4 s with the collector off; ``bench.throughput``
1-5 % more records/s (two runs each, interleaved). The collector stays on: a worker runs for
weeks.

After each recovery (:func:`freeze_long_lived`, called by
:meth:`app.compat.recovery.EtjRecovery.on_recovery_completed`) the young generations are
collected and every object alive is moved to the collector's permanent generation
(``gc.freeze()``): the recovered tables, the modules, Faust's services. They stay alive for the
worker's life, so a full collection that traversed them each time found nothing; frozen, a
collection traverses only what was made since. Rows replaced or deleted later are still freed
by reference counting (rows form no cycles); only a cycle made of objects frozen at that
moment would never be collected (a bounded leak per recovery).

**Fail-stop** (:func:`fail_stop`): a record the worker produced and the broker did not take ends
the process at once with :data:`EXIT_CODE`, committing nothing more; the supervisor starts it
again and the records after the last commit are read again. Why, and which refusals a send
hands back instead: :mod:`app.outputs.delivery`. It is here, below both, because the sends
through Faust's topics (:mod:`app.compat.producer`) and the hot path's
(:mod:`app.outputs.delivery`, which imports that module) end the process alike.

**A refusal** (:func:`refuse`): a join whose partition's state was written by a spec the running
one cannot read it as (:mod:`app.joins.fingerprint`) ends the process at once with
:data:`REFUSED_CODE` and one line that says what changed and the ways forward, committing
nothing more. Not fail-stop's code: a restart does not help, and the alerts tell them apart.

**A start refused by its specs** (:func:`refuse_start`): a join spec that cannot run, found as
the app is loaded (:mod:`app.topology`), is one line on stderr and exit :data:`START_REFUSED`, the
same line ``joins validate`` prints (:mod:`app.commands.joins`, which is left to report it).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import uvloop

from app.settings import Settings

__all__ = [
    "EXIT_CODE",
    "GC_THRESHOLDS",
    "REFUSED_CODE",
    "START_REFUSED",
    "debugging",
    "fail_stop",
    "freeze_long_lived",
    "refusal_line",
    "refuse",
    "refuse_start",
    "use_event_loop",
    "use_gc_thresholds",
    "validating",
]

log = logging.getLogger(__name__)

#: (generation 0 allocations, generation 0 runs per generation 1 run, generation 1 runs per
#: generation 2 run); CPython's default is (700, 10, 10)
GC_THRESHOLDS = (10_000, 10, 10)


def use_event_loop(settings: Settings) -> str:
    """Set the event loop policy from ``settings.event_loop``; the name of the one in force."""
    if settings.event_loop == "uvloop":
        # what mode.loop.use("uvloop") does on its first import only: here on every call
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return type(asyncio.get_event_loop_policy()).__module__.split(".")[0]


def use_gc_thresholds() -> tuple[int, int, int]:
    """Set the collector's thresholds to :data:`GC_THRESHOLDS`; the ones in force after."""
    gc.set_threshold(*GC_THRESHOLDS)
    return gc.get_threshold()


def freeze_long_lived() -> int:
    """After a recovery: collect the young generations, then move every object alive to the
    permanent generation (module docstring); how many objects are frozen now."""
    gc.collect(1)
    gc.freeze()
    return gc.get_freeze_count()


#: exit status of a worker that stopped because a record could not be delivered (EX_TEMPFAIL)
EXIT_CODE = 75

#: how the process ends; a parameter so that unit tests can watch it instead of exiting
_exit: Callable[[int], Any] = os._exit


def fail_stop(reason: str) -> None:
    """End the worker now, committing nothing more: records since the last commit are re-read."""
    log.critical(
        "fail-stop: %s; exiting (%d) without committing offsets, the records after the "
        "last commit are read again on restart",
        reason,
        EXIT_CODE,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    _exit(EXIT_CODE)


#: exit status of a worker that refuses to run a join's state as its spec stands (EX_CONFIG):
#: it refuses again after every restart until the spec or ETJ_APP_ID changes
REFUSED_CODE = 78


def refuse(reason: str) -> None:
    """End the worker now with ``reason`` (one line), committing nothing more."""
    log.critical("%s; exiting (%d)", reason, REFUSED_CODE)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    _exit(REFUSED_CODE)


# --- a spec that cannot run: refused at start in one line -----------------------------------

#: exit status of a process refused at start by its join specs (a usage error, as click's)
START_REFUSED = 2


def validating(argv: Sequence[str]) -> bool:
    """Is this process ``faust -A app.main joins validate …``? Then a spec error at import is
    left for the command to report, and the app loads without joins."""
    args = list(argv)
    return any(a == "joins" and args[i + 1 : i + 2] == ["validate"] for i, a in enumerate(args))


def debugging(argv: Sequence[str]) -> bool:
    """Was the process asked to log at debug level (``-l debug``, ``--loglevel=debug``,
    ``--debug``)?"""
    args = [a.lower() for a in argv]
    if "--debug" in args or "--loglevel=debug" in args:
        return True
    return any(
        a in ("-l", "--loglevel") and args[i + 1 : i + 2] == ["debug"] for i, a in enumerate(args)
    )


def refusal_line(exc: BaseException) -> str:
    """The one line a spec error is refused with, by the worker at start and by ``joins
    validate`` alike: ``app.joins.spec.SpecError: join spec #1 'x': events.key: missing``."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}: {exc}"


def refuse_start(exc: BaseException, argv: Sequence[str] = sys.argv) -> None:
    """A join spec that cannot run, found as the app is loaded: one line on stderr (the
    traceback too at debug level) and exit :data:`START_REFUSED`, before any broker is asked. Not
    for ``joins validate``, which reports it itself (:func:`validating`: this returns).

    Why: raised through Faust's command line, the refusal was the last line of a ~90-line
    traceback."""
    if validating(argv):
        return
    if debugging(argv):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(refusal_line(exc), file=sys.stderr, flush=True)
    raise SystemExit(START_REFUSED)
