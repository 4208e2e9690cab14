"""A stopping worker leaves its consumer group in the group's first generation too.

Upstream (aiokafka 0.14.0, ``GroupCoordinator._maybe_leave_group``): a consumer sends
LeaveGroup on close only ``if self.generation > 0``. On Apache Kafka a joined member's
generation is never 0 (a group's first rebalance makes it 1), so there ``> 0`` means "joined".
The bundled tansu broker numbers a group's first generation 0, so a member of it never says
goodbye: the broker keeps it until its session times out, and the next member to join waits for
it (JoinGroup answered with the gone member as leader, a SyncGroup that fails, a rejoin).

Symptom: after a graceful stop, the next worker of the same app id was ready ~13 s later than
after a stop in a later generation (bare aiokafka consumers, 10 s session: a group's second
member joined in 18.1 s instead of 5.0 s). It was ~13 of the ~21 s ``bench.snapshot_restore``
took to make a restored worker ready (7.5 s with the patch), and it may have been
``bench.recovery``'s one slow run of five (36.7 s against 23.5 s); any restart on one app id
can meet it. ``_original`` is upstream's rule, kept for the test that shows it leaves a member.

Here: leave whenever the coordinator gave this consumer a generation (``>= 0``, i.e. not
aiokafka's "no generation", -1). On Kafka that is the same condition as upstream's. Static
members (``group_instance_id``) still never leave, as upstream. Test:
tests/broker/test_leave_group.py. Remove when aiokafka leaves from generation 0 (or tansu starts
at 1).
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import errors as Errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.group import LeaveGroupRequest

log = logging.getLogger(__name__)

_original = GroupCoordinator._maybe_leave_group
NO_GENERATION = OffsetCommitRequest.DEFAULT_GENERATION_ID  # -1


async def _maybe_leave_group(self: Any) -> None:
    """Upstream's body with ``generation != NO_GENERATION`` for ``generation > 0``."""
    if self.generation != NO_GENERATION and self.member_id and self._group_instance_id is None:
        # a minimal-effort attempt, as upstream: no resend if it fails or times out
        try:
            await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
        except Errors.KafkaError as err:
            log.error("LeaveGroup request failed: %s", err)
        else:
            log.info("LeaveGroup request succeeded")
    self.reset_generation()


def install() -> None:
    GroupCoordinator._maybe_leave_group = _maybe_leave_group  # type: ignore[method-assign]
