"""An attempt's finish sends the run's last records and its outcome in one update.

``AttemptJournal.finish(..., journal=...)`` is one ``append`` update (the workflow takes
it whole or refuses it); only records and outcome too big for one payload go as two,
the records first. No Temporal server: the engine here answers the updates itself.
"""

from __future__ import annotations

from typing import Any

from operative.conversation import Message
from operative.durable import Finished, Generated, RunOutcome
from operative.temporal._journal import AttemptJournal
from operative.temporal._wire import MAX_PAYLOAD, UPDATE_APPEND, Append, AppendReply, decode, encode


class _Updates:
    """Stands in for the engine: notes each append update (its seq and record count)."""

    database = "temporal://test"

    def __init__(self) -> None:
        self.appends: list[tuple[int, int]] = []

    async def _update(self, run_id: str, name: str, payload: bytes) -> bytes:
        assert name == UPDATE_APPEND
        append = decode(payload, Append)
        self.appends.append((append.seq, len(append.records)))
        return encode(AppendReply())


def _attempt(updates: _Updates) -> AttemptJournal:
    engine: Any = updates
    return AttemptJournal(
        engine,
        run_id="r1",
        agent_name="agent",
        session_id=None,
        worker_id="w1",
        heartbeat=lambda: None,
    )


def _generated(step: int, size: int) -> Generated:
    message = Message(id=f"a{step}", role="assistant", content="x" * size)
    return Generated(step=step, message=message)


async def test_the_last_records_and_the_outcome_are_one_update() -> None:
    updates = _Updates()
    attempt = _attempt(updates)
    lease = attempt.lease(10)
    finished = Finished(outcome=RunOutcome(finish_reason="stop-condition"))
    record = await attempt.finish(
        lease, 5, finished, journal=[_generated(3, 10), _generated(4, 10)]
    )
    assert updates.appends == [(5, 3)]
    assert record.status == "completed"


async def test_records_too_big_to_go_with_the_outcome_go_first() -> None:
    updates = _Updates()
    attempt = _attempt(updates)
    lease = attempt.lease(10)
    answer = "y" * 50_000
    finished = Finished(outcome=RunOutcome(finish_reason="stop-condition", content=answer))
    half = MAX_PAYLOAD // 2  # the records fit in one update, not with the outcome too
    big = [_generated(3, half - 10_000), _generated(4, half - 10_000)]
    await attempt.finish(lease, 5, finished, journal=big)
    assert updates.appends == [(5, 2), (7, 1)]
