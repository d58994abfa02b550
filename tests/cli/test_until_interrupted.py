"""The command's Ctrl-C is a cancellation: it lands at a checkpoint, never mid-statement.

Real signals, raised in this process (``signal.raise_signal``), inside ``trio.run``.
"""

from __future__ import annotations

import signal

import pytest
import trio

from operative.cli._interrupt import until_interrupted


def test_sigint_cancels_at_the_next_checkpoint_not_mid_statement() -> None:
    """Under Trio's own handler the signal raises ``KeyboardInterrupt`` on the spot: the
    request coroutine made just before is never awaited. Here the statement finishes
    and the command is cancelled at its next checkpoint."""
    seen: list[str] = []

    async def request() -> None:
        seen.append("awaited")

    async def command() -> int:
        pending = request()
        signal.raise_signal(signal.SIGINT)
        seen.append("the statement finished")
        await pending
        await trio.sleep(60)  # cancelled at once
        return 0

    assert trio.run(until_interrupted, command) is signal.SIGINT
    assert seen == ["the statement finished", "awaited"]


def test_a_command_that_ends_returns_its_code_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    async def command() -> int:
        await trio.lowlevel.checkpoint()
        return 3

    code = trio.run(until_interrupted, command)
    assert code == 3
    assert not isinstance(code, signal.Signals)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_sigterm_cancels_the_command_as_ctrl_c_does() -> None:
    """A process manager's SIGTERM: the command is cancelled at its next checkpoint (its
    clean-up runs) instead of the process ending on the spot."""
    steps: list[str] = []

    async def command() -> int:
        try:
            signal.raise_signal(signal.SIGTERM)
            steps.append("the statement finished")
            await trio.sleep(60)  # cancelled at once
        except trio.Cancelled:
            steps.append("clean-up ran")
            raise
        return 0

    assert trio.run(until_interrupted, command) is signal.SIGTERM
    assert steps == ["the statement finished", "clean-up ran"]


def test_the_clean_up_after_ctrl_c_runs_and_a_second_ctrl_c_stops_it() -> None:
    """The first signal cancels; shielded clean-up still runs. A second signal, pressed
    during that clean-up, interrupts at once (Trio's handler is back)."""
    steps: list[str] = []

    async def command() -> int:
        try:
            signal.raise_signal(signal.SIGINT)
            await trio.sleep(60)  # cancelled at once
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()
                steps.append("clean-up ran")
                signal.raise_signal(signal.SIGINT)
                steps.append("not reached")
            raise
        return 0

    with pytest.RaisesGroup(KeyboardInterrupt):  # out of the nursery running the command
        trio.run(until_interrupted, command)
    assert steps == ["clean-up ran"]


def test_a_command_run_outside_the_main_thread_runs_without_a_receiver() -> None:
    """Signals reach the main thread only; elsewhere the command simply runs."""

    async def command() -> int:
        await trio.lowlevel.checkpoint()
        return 5

    async def main() -> int | None:
        return await trio.to_thread.run_sync(trio.run, until_interrupted, command)

    assert trio.run(main) == 5
