"""Session handles under cancellation: reservations, handle.cancel() and signals."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from operative import create_agent
from operative.kvstore import MemoryStore, Operation, SqliteStore
from operative.sessions import create_session_store, open_session
from operative.testing import ScriptedModel


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    """Virtual time that does not jump while a store's worker thread is busy."""
    return trio.testing.MockClock(autojump_threshold=0.05)


class _GatedStore(MemoryStore):
    """A memory store whose next batch parks until the test lets it through."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: trio.Event | None = None
        self.entered = trio.Event()

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        gate = self.gate
        if gate is not None:
            self.gate = None
            self.entered.set()
            await gate.wait()
        return await super().conditional_batch(operations)


async def test_cancel_during_the_reservation_aborts_the_turn() -> None:
    """handle.cancel() while a turn's reservation is being written stops that turn."""
    kv = _GatedStore()
    sessions = create_session_store(kv)
    agent = create_agent(generate=ScriptedModel(["Hello!"]), name="helper")
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        gate = kv.gate = trio.Event()
        results: list[Any] = []

        async def turn() -> None:
            results.append(await handle.run("hi"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            await kv.entered.wait()
            handle.cancel("stop now")
            gate.set()
    (result,) = results
    assert result.finish_reason == "aborted"


_hooked_commits = [False]
_after_commit: list[Callable[[], object] | None] = [None]


class _HookedCommit(sqlite3.Connection):
    """A connection that runs ``_after_commit`` (in its worker thread) once a COMMIT
    went through, before returning: the caller is cancelled while the commit is still
    reported as in flight."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = super().execute(sql, *args)
        if sql == "COMMIT" and _hooked_commits[0]:
            hook = _after_commit[0]
            if hook is not None:
                hook()
        return cursor


async def test_cancel_during_a_committed_reservation_still_settles_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn cancelled while its reservation commits leaves no RunRef without an outcome."""
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return real_connect(*args, factory=_HookedCommit, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    agent = create_agent(generate=ScriptedModel(["Hello!"]), name="helper")
    async with SqliteStore(tmp_path / "sessions.db") as kv:
        sessions = create_session_store(kv)
        async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
            token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                # The caller is cancelled while the committed reservation's thread runs.
                _after_commit[0] = lambda: trio.from_thread.run_sync(scope.cancel, trio_token=token)
                _hooked_commits[0] = True
                try:
                    await handle.run("hi")
                finally:
                    _hooked_commits[0] = False
                    _after_commit[0] = None
        assert scope.cancelled_caught
        stored = await sessions.load("s")
    assert stored is not None
    assert [m.role for m in stored.conversation_history.messages] == ["user"]  # it committed
    assert [ref.outcome for ref in stored.runs if ref.outcome is None] == []


async def test_signal_does_not_report_delivery_to_a_cancelled_wait() -> None:
    """signal() returns True only when some wait actually receives the payload."""
    sessions = create_session_store(MemoryStore())
    received: list[Any] = []
    async with open_session("s", store=sessions, agent_name="helper") as handle:
        scope = trio.CancelScope()

        async def wait() -> None:
            with scope:
                received.append(await handle.wait_for_signal("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            delivered = handle.signal("go", "approved")
    assert delivered == bool(received)
