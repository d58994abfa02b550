"""Supervisors: workers dispatched in parallel, bounded, with an explicit failure policy."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from operative import FinishReason, GenerateResponse, InvalidArgument, create_agent
from operative.multiagent import create_supervisor, dispatch_tool
from operative.testing import ScriptedModel, check_run_invariants

from ._helpers import call, live_tasks


def _worker(name: str, delay: float = 10.0, script: Any = None) -> Any:
    return create_agent(
        name=name,
        instructions=f"You are {name}.",
        generate=ScriptedModel(script or [f"{name} done"], delay=delay),
    )


def _plan(*pairs: tuple[str, str]) -> Any:
    return call("dispatch", "d1", tasks=[{"worker": w, "task": t} for w, t in pairs])


def _reports(result: Any) -> list[dict[str, Any]]:
    [step] = [s for s in result.steps if s.results]
    value = step.results[0].value
    reports: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(value))
    return reports


async def test_three_ten_second_workers_finish_in_ten_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Workers run in parallel: three 10 s workers take 10 s, and their reports are in
    the order the supervisor asked for them."""
    workers = [_worker("a"), _worker("b"), _worker("c")]
    supervisor = create_supervisor(
        generate=ScriptedModel([_plan(("c", "x"), ("a", "y"), ("b", "z")), "summary"]),
        workers=workers,
    )
    events: list[Any] = []
    start = trio.current_time()
    async with supervisor.open_run("do it") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    assert trio.current_time() - start == pytest.approx(10)
    assert result.content == "summary"
    reports = _reports(result)
    assert [(r["worker"], r["outcome"], r["answer"]) for r in reports] == [
        ("c", "success", "c done"),
        ("a", "success", "a done"),
        ("b", "success", "b done"),
    ]
    children = {e.child_run_id for e in events if e.type == "subagent.event"}
    assert children == {f"{run.run_id}/d1/{i}" for i in range(3)}
    check_run_invariants(result, events)


async def test_concurrency_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    """With max_concurrency=2, four 10 s workers take 20 s, never more than two at once."""
    running = 0
    peak = 0

    async def model(request: Any) -> GenerateResponse:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(10)
        running -= 1
        return GenerateResponse(content="ok")

    workers = {f"w{i}": create_agent(name=f"w{i}", generate=model) for i in range(4)}
    supervisor = create_supervisor(
        generate=ScriptedModel([_plan(*((f"w{i}", "t") for i in range(4))), "done"]),
        workers=workers,
        max_concurrency=2,
    )
    start = trio.current_time()
    result = await supervisor.run("go")
    assert trio.current_time() - start == pytest.approx(20)
    assert peak == 2
    assert [r["outcome"] for r in _reports(result)] == ["success"] * 4


async def test_isolate_reports_a_failed_worker_and_lets_the_others_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under "isolate" a failing worker is an error report; its siblings finish."""
    broken = _worker("broken", delay=1, script=[RuntimeError("model down")])
    supervisor = create_supervisor(
        generate=ScriptedModel([_plan(("a", "x"), ("broken", "y"), ("b", "z")), "partial"]),
        workers=[_worker("a"), broken, _worker("b")],
    )
    result = await supervisor.run("go")
    assert result.content == "partial"
    reports = _reports(result)
    assert [r["outcome"] for r in reports] == ["success", "error", "success"]
    assert "model down" in reports[1]["error"]
    assert reports[1]["finish_reason"] == "error"


async def test_cancel_siblings_cancels_the_others_at_the_first_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under "cancel_siblings" the first failure cancels every other worker at once; the
    dispatch call is an error result and no task is left."""
    broken = _worker("broken", delay=1, script=[RuntimeError("model down")])
    supervisor = create_supervisor(
        generate=ScriptedModel([_plan(("a", "x"), ("broken", "y"), ("b", "z")), "gave up"]),
        workers=[_worker("a"), broken, _worker("b")],
        on_worker_error="cancel_siblings",
    )
    events: list[Any] = []
    start = trio.current_time()
    async with supervisor.open_run("go") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    assert trio.current_time() - start == pytest.approx(1)
    assert live_tasks() == []
    assert result.content == "gave up"
    [step] = [s for s in result.steps if s.results]
    dispatched = step.results[0]
    assert dispatched.outcome == "error"
    assert "WorkerFailedError" in (dispatched.error or "")
    assert '"outcome":"cancelled"' in (dispatched.error or "")
    finished = [e for e in events if e.type == "subagent.completed"]
    assert sorted(str(e.finish_reason) for e in finished) == ["aborted", "aborted", "error"]
    check_run_invariants(result, events)


async def test_parent_abort_cancels_every_worker(autojump_clock: trio.testing.MockClock) -> None:
    """Aborting the supervisor mid-dispatch ends every worker; nothing is left running."""
    supervisor = create_supervisor(
        generate=ScriptedModel([_plan(("a", "x"), ("b", "y")), "never"]),
        workers=[_worker("a"), _worker("b")],
    )
    events: list[Any] = []
    async with supervisor.open_run("go") as run:
        run.add_listener("*", events.append)
        await trio.sleep(3)
        run.abort("stop")
    assert live_tasks() == []
    result = await run.result()
    assert result.finish_reason is FinishReason.ABORTED
    check_run_invariants(result, events)


async def test_unknown_worker_and_bad_arguments() -> None:
    """An unknown worker is an error report; bad configuration fails where it is made."""
    supervisor = create_supervisor(
        generate=ScriptedModel([_plan(("nobody", "x")), "ok"]), workers=[_worker("a", 0)]
    )
    result = await supervisor.run("go")
    [report] = _reports(result)
    assert report["outcome"] == "error"
    assert "no worker is named 'nobody'" in report["error"]
    with pytest.raises(InvalidArgument):
        dispatch_tool([_worker("a")], max_concurrency=0)
    with pytest.raises(InvalidArgument):
        dispatch_tool([_worker("a")], on_worker_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        dispatch_tool([])
