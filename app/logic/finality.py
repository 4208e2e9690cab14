"""Finality promises: when a join's answer can no longer change, as pure rules (no Faust, no
clock, no broker).

Per partition p of a join, a promise says: *every join of partition p with event time before
``final_before`` is final* — the stream will never emit another revision of it. Why it can be
kept: the rules never revise a join older than the retention horizon (stream time − retention:
versions re-join from it on, the revisit reviews from it on, events and versions older than
it go to ``etj-late``), and stream time never goes back. So once the outputs of the batch
that brought partition p's stream time to S are *delivered* (acked by the broker, or their
input offsets committed), no revision of a join before ``S − retention`` is still to come, nor
still on its way: that value can be promised.

The engine keeps, per partition, a :class:`Promise` in its clock table (a changelog row,
written in the batch that publishes the promise, so it is durable before the promise leaves
with the batch's outputs: a crash can replay a promise, never break one) and asks
:func:`next_step` what to do at the first record of each batch. One promise is in flight at a
time per partition; the next one waits until it is delivered. With ``"emit": "final"`` the
promise carries the final revisions of the joins it covers (``[sent_from, final_before)``):
re-sent with it if a crash lost them.

Shapes: a stored promise is ``[final_before, sent_from, source]`` (JSON; ``source`` the
engine's ``[input, offset]`` of the record whose outputs carry it, None once delivered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Promise", "Step", "next_step", "ready_before", "ready_now"]

Step = Literal["none", "new", "again", "settled"]


@dataclass(slots=True)
class Promise:
    """One partition's promise as stored (module docstring)."""

    #: every join with event time before it is final (None: nothing promised yet)
    final_before: int | None = None
    #: the range ``[sent_from, final_before)`` the promise in flight covers (its emit=final
    #: records); None: from the first join
    sent_from: int | None = None
    #: the input record whose outputs carry the promise in flight; None: delivered
    source: Any = None

    def to_json(self) -> list[Any]:
        return [self.final_before, self.sent_from, self.source]

    @classmethod
    def from_json(cls, raw: Any) -> Promise:
        return cls() if raw is None else cls(raw[0], raw[1], raw[2])

    @property
    def delivered_before(self) -> int | None:
        """Joins before this have had their promise (and final records) delivered: what the
        state may purge (None: nothing yet)."""
        return self.sent_from if self.source is not None else self.final_before


def ready_before(
    pending: list[tuple[int, Any]],
    delivered: Any,
    retention_ms: int,
) -> int | None:
    """Pop the batches of ``pending`` ((stream time at the batch's end, a record of the
    batch), oldest first) whose outputs are ``delivered(record)``; the promise they allow
    (the last one's stream time − retention), or None."""
    ready = None
    while pending and delivered(pending[0][1]):
        ready = pending.pop(0)[0] - retention_ms
    return ready


def ready_now(
    pending: list[tuple[int, Any]], delivered: Any, retention_ms: int, kept: int | None
) -> int | None:
    """What may be promised now: :func:`ready_before` of ``pending``, or ``kept`` — what an
    earlier batch found ready and no promise has used yet — if more. Why: ``ready_before``
    pops the delivered batches; while a promise is still in flight :func:`next_step` cannot
    use what they allow, and dropped, it was gone for good once the stream time stopped
    moving (the last promise of a stream that went quiet never came: emit=final never sent
    the last joins, tests/broker/test_finality_broker.py). The caller keeps what this
    returns until a ``new`` step uses it."""
    ready = ready_before(pending, delivered, retention_ms)
    if kept is not None and (ready is None or kept > ready):
        return kept
    return ready


def next_step(
    promise: Promise,
    ready: int | None,
    delivered: bool,
    emitted: bool,
) -> tuple[Step, int | None, int | None]:
    """What the engine does for one partition at a batch's first record, and the range of
    joins it concerns: ``(step, lo, hi)``; ``promise`` is updated in place (the caller stores
    it with the batch and, for ``new``/``again``, sends the promise record — and, emit=final,
    the final revisions of ``[lo, hi)`` — with this record's outputs, its new ``source``).

    - ``settled``: the promise in flight is delivered (``delivered``: its source's outputs are
      in the log); nothing to send, and a new one may follow at the next batch;
    - ``again``: it is not delivered and not on its way from this process (``emitted``
      False: a restarted worker) — send it again;
    - ``new``: none in flight and ``ready`` (:func:`ready_before`) promises more;
    - ``none``: nothing to do.
    """
    if promise.source is not None:
        if delivered:
            promise.source = None
            promise.sent_from = promise.final_before
            return "settled", None, None
        if not emitted:
            return "again", promise.sent_from, promise.final_before
        return "none", None, None
    if ready is not None and (promise.final_before is None or ready > promise.final_before):
        lo = promise.final_before
        promise.sent_from, promise.final_before = lo, ready
        return "new", lo, ready
    return "none", None, None
