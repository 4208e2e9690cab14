"""The engine every agent runs on: the durable loop, one per agent, a fetch at a time.

In the order a batch meets it:

- :mod:`app.loop.intake` — the loop's way in: the batches its inbox holds, parsed and through
  the door, into flow control (:mod:`app.inputs`);
- :mod:`app.loop.durable` — the loop itself: the protocol every agent keeps (handle, flush,
  changelog durable, outputs durable, ack), the handling of each record through its engine's
  rules (:mod:`app.agents`);
- :mod:`app.loop.pipeline` — its way out: a handled batch's changelog rows, then its outputs, to
  the broker (:mod:`app.outputs`), then each input partition's handled range acked;
- :mod:`app.loop.acks` — what a loop knows delivered;
- :mod:`app.loop.dead_letters` — dead letters: an input that cannot be joined, with its reason,
  and poison pills: an output the broker refuses for good dead-letters its input;
- :mod:`app.loop.stall_guard` — a timer: an input partition whose fetched records never reached
  its loop is read again; it says where each loop waits with :mod:`app.loop.awaiting`.

:mod:`app.loop.types` holds what they share (``Engine``, ``Unit``, ``Out``, ``Source``) and
imports nothing else of the loop, so no part of it imports another back.
"""
