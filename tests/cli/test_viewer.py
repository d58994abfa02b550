"""The run viewer's pages: ``runs show --html`` writes a valid standalone page, and the
renderer draws what the run store records (a bar per tool call, a row per step,
recoveries, approvals, aborts and errors)."""

from __future__ import annotations

import re
from pathlib import Path

import html5lib  # type: ignore[import-untyped]
import trio

from operative import ToolCall, ToolResult, Usage
from operative.cli._viewer import render_run, render_runs
from operative.conversation import ConversationHistory, Message
from operative.durable._records import RunOutcome
from operative.runstore import RunDetail, RunSummary, StepRecord, ToolCallRecord

from ._fake_openai import Failure, open_fake_openai
from ._process import clean_env, operative

RUN_ID = re.compile(r"durable run (run_\w+)")
T0 = 1_800_000_000.0


def parse_errors(page: str) -> list[object]:
    """The parse errors html5lib reports for ``page``."""
    parser = html5lib.HTMLParser(strict=False)
    parser.parse(page)
    return list(parser.errors)


def tool_bars(page: str) -> list[tuple[str, str]]:
    """(outcome, call id) of each tool call's bar."""
    found: list[tuple[str, str]] = re.findall(
        r'<rect class="bar tool ([\w-]+)" data-call-id="([^"]+)"', page
    )
    return found


def step_rows(page: str) -> list[str]:
    return re.findall(r'<g class="step-row" data-step="(\d+)"', page)


def summary(status: str, **extra: object) -> RunSummary:
    fields: dict[str, object] = {
        "run_id": f"run_{status}",
        "agent_name": "support",
        "session_id": "s-1",
        "status": status,
        "finish_reason": None,
        "created_at": T0,
        "updated_at": T0 + 9,
        "steps": 2,
        "usage": Usage(prompt=100, completion=20, total=120),
        "cost_usd": None,
        "unpriced": True,
        "unpriced_models": (),
        "by_model": (),
        "lease_owner": None,
        "lease_expires_at": 0.0,
        "cancel_requested": False,
        "cancel_reason": None,
        "outcome": None,
    }
    fields.update(extra)
    return RunSummary(**fields)  # type: ignore[arg-type]


def step(
    number: int, calls: tuple[ToolCall, ...], at: float, *, state: str = "completed"
) -> StepRecord:
    message = Message(
        id=f"m{number}", role="assistant", content=f"step {number} says", tool_calls=calls
    )
    return StepRecord(
        step=number,
        state=state,  # type: ignore[arg-type]
        message=message,
        content=message.text,
        tool_calls=calls,
        results=(),
        usage=Usage(prompt=50, completion=10, total=60),
        model="gpt-test",
        cost_usd=0.0012,
        committed_at=at,
        completed_at=at + 3 if state == "completed" else None,
    )


def call(
    number: int, call_id: str, start: float, end: float | None, **extra: object
) -> ToolCallRecord:
    fields: dict[str, object] = {
        "run_id": "run_x",
        "step": number,
        "call_id": call_id,
        "tool_name": "lookup",
        "arguments": {"q": call_id},
        "outcome": "success",
        "result": ToolResult(
            call_id=call_id, tool_name="lookup", outcome="success", value="found it"
        ),
        "error": None,
        "started_at": start,
        "settled_at": end,
        "duration": None if end is None else end - start,
    }
    fields.update(extra)
    return ToolCallRecord(**fields)  # type: ignore[arg-type]


def detail(
    run: RunSummary, steps: tuple[StepRecord, ...], calls: tuple[ToolCallRecord, ...]
) -> RunDetail:
    history = ConversationHistory(
        messages=(Message(id="m0", role="user", content="find the order"),)
    )
    return RunDetail(summary=run, steps=steps, tool_calls=calls, transcript=history)


def test_parallel_calls_are_drawn_side_by_side_at_their_times() -> None:
    """Two calls of one step overlap in time: two bars on their own rows, their x
    positions following their start times."""
    a, b = (
        ToolCall(id="a", name="lookup", arguments={}),
        ToolCall(id="b", name="lookup", arguments={}),
    )
    run = detail(
        summary(
            "completed",
            finish_reason="stop-condition",
            outcome=RunOutcome(finish_reason="stop-condition", content="done"),
        ),
        (step(1, (a, b), T0 + 2), step(2, (), T0 + 8)),
        (call(1, "a", T0 + 2.5, T0 + 4), call(1, "b", T0 + 3, T0 + 5)),
    )
    page = render_run(run, now=T0 + 100)
    assert parse_errors(page) == []
    assert tool_bars(page) == [("success", "a"), ("success", "b")]
    assert step_rows(page) == ["1", "2"]
    xs = [float(x) for x in re.findall(r'data-call-id="[ab]" x="([\d.]+)"', page)]
    ys = [int(y) for y in re.findall(r'data-call-id="[ab]" x="[\d.]+" y="(\d+)"', page)]
    assert xs[0] < xs[1]
    assert ys[0] < ys[1]
    assert "find the order" in page
    assert "found it" in page
    assert "$0.0012" in page


def test_recoveries_approvals_aborts_and_in_flight_calls_are_marked() -> None:
    """An aborted run with a recovered call, one waiting for approval and one in flight
    when it ended: each is marked, and the abort reason is shown."""
    c = ToolCall(id="c", name="lookup", arguments={})
    run = detail(
        summary(
            "aborted",
            finish_reason="aborted",
            lease_owner="worker-7",
            outcome=RunOutcome(finish_reason="aborted", abort_reason="cancelled by ops"),
        ),
        (step(1, (c,), T0 + 1), step(2, (c,), T0 + 6, state="aborted")),
        (
            call(1, "r", T0 + 1.5, T0 + 3, attempts=3),
            call(1, "p", T0 + 1.5, T0 + 2, outcome="action-required", result=None),
            call(
                2,
                "u",
                T0 + 6.5,
                T0 + 9,
                outcome="cancelled",
                result=None,
                duration=None,
                unknown_outcome=True,
            ),
        ),
    )
    page = render_run(run, now=T0 + 100)
    assert parse_errors(page) == []
    assert [o for o, _ in tool_bars(page)] == ["success", "action-required", "cancelled"]
    assert "↻3" in page
    assert "waits for approval" in page
    assert "? outcome unknown" in page
    assert 'class="abort-mark"' in page
    assert "cancelled by ops" in page
    assert (
        "1 call(s) run again after a worker stopped (up to 3 attempts); 1 with an unknown outcome"
        in page
    )
    assert 'data-state="aborted"' in page


def test_an_in_flight_run_refreshes_only_when_live() -> None:
    """A running run's page carries the refresh script when served live, and its bars of
    calls in flight reach ``now``; the standalone page has no script at all."""
    c = ToolCall(id="f", name="lookup", arguments={})
    run = detail(
        summary("running", lease_owner="worker-1", lease_expires_at=T0 + 30, updated_at=T0 + 2),
        (step(1, (c,), T0 + 1, state="in-progress"),),
        (call(1, "f", T0 + 1.5, None, outcome="in-flight", result=None),),
    )
    live = render_run(run, now=T0 + 10, live=True)
    still = render_run(run, now=T0 + 10)
    assert parse_errors(live) == []
    assert parse_errors(still) == []
    assert 'data-live="1"' in live
    assert "<script>" in live
    assert "<script" not in still
    assert 'data-live="0"' in still
    assert "worker-1 until" in live
    width = float(re.search(r'data-call-id="f" x="[\d.]+" y="\d+" width="([\d.]+)"', live).group(1))  # type: ignore[union-attr]
    assert width > 300  # 8.5 of the run's 10 seconds


def test_the_runs_page_lists_runs_and_keeps_the_filters() -> None:
    runs = [summary("completed"), summary("running")]
    page = render_runs(
        runs, filters={"status": "running", "agent": "support<x>"}, next_cursor="c1", live=True
    )
    assert parse_errors(page) == []
    assert page.count('<tr class="run"') == 2
    assert '<option value="running" selected>' in page
    assert 'value="support&lt;x&gt;"' in page
    assert "after=c1" in page
    assert "status=running" in page
    assert 'data-live="1"' in page
    assert 'data-live="0"' in render_runs(runs[:1], filters={}, live=True)


def test_runs_show_html_writes_the_demo_run(tmp_path: Path) -> None:
    """The demo's run: a valid page with its two steps and a bar per tool call."""
    data = ["--data-dir", str(tmp_path)]
    demo = operative("demo", "--offline", *data)
    assert demo.returncode == 0, demo.stderr
    run_id = RUN_ID.search(demo.stdout).group(1)  # type: ignore[union-attr]
    target = tmp_path / "run.html"
    done = operative("runs", "show", run_id, *data, "--html", str(target))
    assert done.returncode == 0, done.stderr
    assert f"wrote {target}" in done.stdout
    page = target.read_text()
    assert parse_errors(page) == []
    assert step_rows(page) == ["1", "2"]
    assert sorted(call_id for _, call_id in tool_bars(page)) == ["call-1-1-1", "call-1-1-2"]
    assert "Lisbon: clear, 23 °C (demo data)" in page
    assert "<script" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")


async def test_runs_show_html_shows_a_failed_runs_error(tmp_path: Path) -> None:
    async with open_fake_openai() as server:
        server.replies.append(Failure(status=400, message="no such model: gpt-nope"))
        env = clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=server.url)
        demo = await trio.to_thread.run_sync(
            lambda: operative(
                "demo", "--model", "openai:gpt-nope", "--data-dir", str(tmp_path), env=env
            )
        )
    run_id = RUN_ID.search(demo.stdout).group(1)  # type: ignore[union-attr]
    target = tmp_path / "failed.html"
    done = operative("runs", "show", run_id, "--data-dir", str(tmp_path), "--html", str(target))
    assert done.returncode == 0, done.stderr
    page = target.read_text()
    assert parse_errors(page) == []
    found = re.search(r'<div class="error" id="run-error">([^<]*)</div>', page)
    assert found is not None
    assert "no such model: gpt-nope" in found.group(1)
    assert step_rows(page) == []


def test_an_unwritable_html_path_says_what_to_do(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    demo = operative("demo", "--offline", *data)
    run_id = RUN_ID.search(demo.stdout).group(1)  # type: ignore[union-attr]
    done = operative(
        "runs", "show", run_id, *data, "--html", str(tmp_path / "no" / "such" / "x.html")
    )
    assert done.returncode != 0
    assert "cannot write it" in done.stderr
    assert "pick another path" in done.stderr
