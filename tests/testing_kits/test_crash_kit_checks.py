"""The crash kit's invariant checks: silent on a sound journal, and each one reports the
fault it exists for when a journal or the effect log is broken on purpose."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import trio.testing

from operative.durable import (
    Durable,
    JournalEntry,
    SqliteCheckpointStore,
    SqliteEngine,
    ToolSettled,
    ToolStarted,
)
from operative.testing._crash_checks import check_effects, check_journal, check_stored_run
from operative.testing._crash_worker import _sink, read_effects

from ._crash_kit_agents import sound_agent

IDEMPOTENT = {"lookup"}


def _idempotent(name: str) -> bool:
    return name in IDEMPOTENT


async def _journal(tmp_path: Path, clock: trio.testing.MockClock) -> tuple[Any, Any, Any]:
    """A sound run's journal and effect lines, and the engine and store holding them."""
    clock.autojump_threshold = 0.25  # SQLite works in threads: jump only once they idle
    path = str(tmp_path / "durable.db")
    engine, store = SqliteEngine(path), SqliteCheckpointStore(path)
    effects = str(tmp_path / "effects.log")
    token = _sink.set((effects, "w1"))
    try:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="r1", worker_id="w1")
        async with sound_agent().open_run("Go.", durable=durable) as run:
            result = await run.result()
    finally:
        _sink.reset(token)
    assert result.finish_reason == "stop-condition", result
    return engine, store, read_effects(effects)


def _renumbered(entries: list[JournalEntry]) -> list[JournalEntry]:
    first = entries[0].seq
    return [msgspec.structs.replace(e, seq=first + i) for i, e in enumerate(entries)]


def _check(entries: list[JournalEntry], effects: list[dict[str, Any]]) -> list[str]:
    return check_journal("r1", entries, effects, _idempotent, Counter())


async def test_each_check_reports_its_fault(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    engine, store, effects = await _journal(tmp_path, autojump_clock)
    async with engine, store:
        entries = list(await store.read("r1"))
        assert _check(entries, effects) == []
        assert len(effects) == 3  # charge, lookup, note

        settle = next(i for i, e in enumerate(entries) if isinstance(e.record, ToolSettled))
        doubled = _renumbered([*entries[: settle + 1], entries[settle], *entries[settle + 1 :]])
        assert any("2 results in the journal" in p for p in _check(doubled, effects))

        gap = [*entries[:2], *entries[3:]]
        assert any("sequence numbers not contiguous" in p for p in _check(gap, effects))

        charge = next(
            e
            for e in entries
            if isinstance(e.record, ToolStarted) and e.record.tool_name == "charge"
        )
        started = entries.index(charge)
        again = _renumbered([*entries[: started + 1], charge, *entries[started + 1 :]])
        (problem,) = _check(again, effects)
        assert "charge) is not idempotent, was cut short and ran again" in problem

        late = [dict(line) for line in effects]
        late[0]["at"] = entries[-1].at + 1.0  # charge's effect after its result committed
        (problem,) = _check(entries, late)
        assert "ran again after its result was committed" in problem

        assert (
            await check_stored_run(
                "r1",
                engine,
                store,
                acked=True,
                snapshots=[entries[:3]],
                effects=effects,
                idempotent=_idempotent,
                stats=Counter(),
            )
            == []
        )
        rewritten = [entries[0], msgspec.structs.replace(entries[1], at=0.0)]
        (problem,) = await check_stored_run(
            "r1",
            engine,
            store,
            acked=True,
            snapshots=[rewritten],
            effects=effects,
            idempotent=_idempotent,
            stats=Counter(),
        )
        assert "rewrote journal entries" in problem
        (problem,) = await check_stored_run(
            "lost",
            engine,
            store,
            acked=True,
            snapshots=[],
            effects=[],
            idempotent=_idempotent,
            stats=Counter(),
        )
        assert "acknowledged as durably started, then lost" in problem


def test_an_effect_that_is_not_repeatable_happens_once() -> None:
    line = {"worker": "w1", "run": "r1", "call": "c1", "at": 1.0}
    once = {**line, "key": "charge", "repeatable": False}
    read = {**line, "key": "read", "repeatable": True}
    assert check_effects([once, read, read]) == []
    (problem,) = check_effects([once, {**once, "worker": "w2"}, read])
    assert problem == "effect 'charge' happened 2 times (r1 c1 by w1; r1 c1 by w2)"
