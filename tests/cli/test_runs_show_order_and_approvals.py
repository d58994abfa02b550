"""``runs show`` and the run viewer: a step's calls in the order the model asked for
them, and a run that stopped for a person's approval shown as waiting for it."""

from __future__ import annotations

import argparse
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from operative import ToolCall, ToolResult
from operative.cli import _inspect
from operative.cli._output import Output
from operative.cli._viewer import calls_by_step, render_run
from operative.durable._records import RunOutcome
from operative.runstore import RunDetail

from .test_viewer import T0, call, detail, parse_errors, step, summary


def _three_calls_started_out_of_order() -> RunDetail:
    """Step 1 asks for a, b, c; the store lists them as they started: c, a, b."""
    asked = tuple(ToolCall(id=i, name="lookup", arguments={}) for i in "abc")
    return detail(
        summary(
            "completed",
            finish_reason="stop-condition",
            outcome=RunOutcome(finish_reason="stop-condition", content="done"),
        ),
        (step(1, asked, T0 + 1), step(2, (), T0 + 8)),
        (
            call(1, "c", T0 + 1.1, T0 + 2),
            call(1, "a", T0 + 1.2, T0 + 2),
            call(1, "b", T0 + 1.3, T0 + 2),
        ),
    )


def _stopped_for_approval() -> RunDetail:
    """A turn whose last step parked a call for approval (and the run then stopped)."""
    asked = (
        ToolCall(id="r", name="lookup", arguments={}),
        ToolCall(id="d", name="delete_file", arguments={}),
    )
    results = (
        ToolResult(call_id="r", tool_name="lookup", outcome="success", value="found"),
        ToolResult(call_id="d", tool_name="delete_file", outcome="action-required"),
    )
    last = msgspec.structs.replace(step(1, asked, T0 + 1), results=results)
    return detail(
        summary(
            "completed",
            finish_reason="stop-condition",
            outcome=RunOutcome(finish_reason="stop-condition"),
        ),
        (last,),
        (
            call(1, "r", T0 + 1.1, T0 + 2),
            call(1, "d", T0 + 1.1, T0 + 1.2, outcome="action-required", result=None),
        ),
    )


async def _runs_show(run: RunDetail, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``operative runs show`` prints for ``run`` (the store answering with it)."""

    class Runs:
        async def run(self, run_id: str) -> RunDetail:
            return run

    class State:
        runs = Runs()

    @asynccontextmanager
    async def open_state(path: Path, *, create: bool = True) -> AsyncIterator[Any]:
        yield State()

    async def missing(args: argparse.Namespace) -> bool:
        return False

    monkeypatch.setattr(_inspect, "open_state", open_state)
    monkeypatch.setattr(_inspect, "_missing", missing)
    args = argparse.Namespace(
        run_id=run.summary.run_id,
        data_dir=Path("unused"),
        html=None,
        json=False,
        temporal=None,
        namespace=None,
        task_queue=None,
    )
    stdout = io.StringIO()
    await _inspect.runs_show(args, Output(stdout, io.StringIO(), color=False))
    return stdout.getvalue()


async def test_runs_show_lists_a_steps_calls_in_call_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown = await _runs_show(_three_calls_started_out_of_order(), monkeypatch)
    lines = [line for line in shown.splitlines() if line.startswith("call ")]
    assert [line.split()[1] for line in lines] == ["a", "b", "c"]


def test_the_viewer_draws_a_steps_calls_in_call_order() -> None:
    run = _three_calls_started_out_of_order()
    assert [c.call_id for c in calls_by_step(run)[1]] == ["a", "b", "c"]
    page = render_run(run, now=T0 + 100)
    assert parse_errors(page) == []
    assert page.index('data-call-id="a"') < page.index('data-call-id="b"')
    assert page.index('data-call-id="b"') < page.index('data-call-id="c"')


def test_the_viewer_shows_a_turn_stopped_for_approval_as_waiting() -> None:
    """Not "completed": the run's status says it waits for approval, naming the tool,
    and its last step says how many calls wait."""
    page = render_run(_stopped_for_approval(), now=T0 + 100)
    assert parse_errors(page) == []
    assert '<span class="status status-waiting">waiting for approval</span>' in page
    assert "(delete_file; the run completed: stop-condition)" in page
    assert '<span class="status status-completed">' not in page
    assert "1 call waiting for approval" in page


def test_a_completed_run_with_no_parked_call_is_completed() -> None:
    page = render_run(_three_calls_started_out_of_order(), now=T0 + 100)
    assert '<span class="status status-completed">completed</span>' in page
    assert 'status-waiting">' not in page
    assert "call waiting for approval" not in page


async def test_runs_show_says_a_turn_waits_for_approval(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = await _runs_show(_stopped_for_approval(), monkeypatch)
    assert "  status    waiting for approval (delete_file; the run completed: " in shown
