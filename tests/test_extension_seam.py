"""The extension seam, exercised directly: which boundaries a run calls, in what order,
and what a feature may do through them (see ``operative/_core/_extension.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from operative import (
    ActiveRun,
    CleanupError,
    Conversation,
    FinishReason,
    GenerateFunction,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    RunResult,
    StepResult,
    ToolCall,
    ToolContext,
    ToolResult,
    Usage,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative.budgets import Budget
from operative.context import ContextManagement, summarize
from operative.durable import (
    Durable,
    SqliteDurable,
    ToolSettled,
    ToolStarted,
    recover,
)
from operative.extending import Extension, ResumePoint
from operative.retry import RetryOptions
from operative.testing import ScriptedModel
from operative.tools import ExecutionContext

Execute = Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]]
STOP = stop_when.no_tool_calls()


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def user(text: str) -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


def adding() -> ScriptedModel:
    """Step 1 calls ``add``; step 2 answers."""
    return ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}),)
            ),
            "It is 5.",
        ]
    )


# -- a feature that records every boundary it is called at ------------------------------


class Recorder(Extension):
    """Overrides every boundary and appends what it saw to ``log``."""

    def __init__(self, log: list[tuple[Any, ...]], probe: Callable[[ActiveRun], Any]) -> None:
        self.log = log
        self.probe = probe
        self.run: ActiveRun | None = None

    def _see(self, *entry: Any) -> None:
        """Log ``entry`` and, last, what the probe sees of the run (None before it)."""
        self.log.append((*entry, None if self.run is None else self.probe(self.run)))

    def attached(self, run: ActiveRun) -> None:
        self.run = run
        self._see("attached")

    def wrap_generate(self, generate: GenerateFunction) -> GenerateFunction:
        self._see("wrap_generate")
        return generate

    def start_tasks(self, run: ActiveRun, nursery: trio.Nursery) -> None:
        self._see("start_tasks")

    async def run_started(self, run: ActiveRun) -> ResumePoint | None:
        self._see("run_started")
        return None

    def wrap_loop(
        self, run: ActiveRun, loop: Callable[[], Awaitable[FinishReason]]
    ) -> Callable[[], Awaitable[FinishReason]]:
        self._see("wrap_loop")
        return loop

    async def step_started(self, run: ActiveRun, step: int) -> None:
        self._see("step_started", step)

    def replayed(self, run: ActiveRun, step: int) -> GenerateResponse | None:
        self._see("replayed", step)
        return None

    async def generated(
        self, run: ActiveRun, step: int, response: GenerateResponse, usage: Usage
    ) -> None:
        self._see("generated", step)

    def wrap_tool(self, run: ActiveRun, execute: Execute, step: int) -> Execute:
        self._see("wrap_tool", step)

        async def recorded(call: ToolCall, context: ExecutionContext) -> ToolResult:
            self._see("tool", call.name)
            return await execute(call, context)

        return recorded

    async def tool_parked(self, run: ActiveRun, step: int, call: ToolCall, *, parked: bool) -> None:
        self._see("tool_parked", step, parked)

    async def step_completed(self, run: ActiveRun, step: StepResult) -> None:
        self._see("step_completed", step.step)

    async def run_ending(self, run: ActiveRun, result: RunResult, *, shutdown: bool) -> RunResult:
        self._see("run_ending", result.finish_reason, shutdown)
        return result


class Recording:
    """The feature: one :class:`Recorder` per run, each with a log of its own."""

    def __init__(self, probe: Callable[[ActiveRun], Any] = lambda run: None) -> None:
        self.probe = probe
        self.logs: list[list[tuple[Any, ...]]] = []

    def extension(self, config: Any) -> Recorder:
        self.logs.append([])
        return Recorder(self.logs[-1], self.probe)


def names(log: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The log without what the probe saw (each entry's last item)."""
    return [entry[:-1] for entry in log]


def seen(log: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Any]:
    """What the probe saw at each boundary call."""
    return {entry[:-1]: entry[-1] for entry in log}


EXPECTED = [
    ("wrap_generate",),
    ("attached",),
    ("start_tasks",),
    ("run_started",),
    ("wrap_loop",),
    ("step_started", 1),
    ("replayed", 1),
    ("generated", 1),
    ("wrap_tool", 1),
    ("tool", "add"),
    ("step_completed", 1),
    ("step_started", 2),
    ("replayed", 2),
    ("generated", 2),
    ("step_completed", 2),
    ("run_ending", FinishReason.STOP_CONDITION, False),
]
"""The boundaries of a two-step run whose first step calls one tool. ``wrap_generate``
comes first: the run's generate is wrapped as the run is made, before ``attached``."""


async def test_the_boundaries_come_in_order(autojump_clock: trio.testing.MockClock) -> None:
    """Every boundary of a run with a tool call, in the order the loop reaches them,
    each seeing the run as it is then (steps completed so far)."""
    recording = Recording(probe=lambda run: len(run.steps))
    async with open_run(
        generate=adding(),
        conversation=user("2 + 3?"),
        tools=[add],
        stop_when=STOP,
        extensions=[recording],
    ) as run:
        result = await run.result()
    assert result.content == "It is 5."
    (log,) = recording.logs
    assert names(log) == EXPECTED
    steps = seen(log)
    assert steps[("step_started", 2)] == 1  # step 1 is in run.steps when step 2 begins
    assert steps[("step_completed", 1)] == 0  # ... but not yet at its own step_completed
    assert steps[("run_ending", FinishReason.STOP_CONDITION, False)] == 2


async def test_a_parked_call_is_reported_at_tool_parked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call that waits for a person is reported parked, then approved, between
    ``wrap_tool`` and ``step_completed``."""

    @tool(needs_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    async def approve(pending: Any) -> bool:
        await trio.sleep(5)
        return True

    recording = Recording()
    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(ToolCall(id="d", name="delete", arguments={"path": "x"}),)
            ),
            "ok",
        ]
    )
    async with open_run(
        generate=model,
        stop_when=STOP,
        conversation=user("delete x"),
        tools=[delete],
        on_approval=approve,
        extensions=recording,
    ) as run:
        result = await run.result()
    assert result.steps[0].results[0].value == "deleted x"
    step_one = names(recording.logs[0])[8:12]
    assert step_one == [
        ("wrap_tool", 1),
        ("tool", "delete"),
        ("tool_parked", 1, True),
        ("tool_parked", 1, False),
    ]


# -- the same boundaries around a durable run (SQLite) -----------------------------------


def sqlite(path: Path) -> SqliteDurable:
    return SqliteDurable(path / "durable.db")


async def test_a_durable_run_calls_the_same_boundaries_with_the_journal_outermost(
    tmp_path: Path,
) -> None:
    """With ``durable=`` the feature sees the same boundaries. The journal is attached
    last: its ``run_started`` (the run record) comes after the feature's, and its tool
    wrapper is outermost, so ``tool.started`` is committed before the feature's wrapper
    runs, and the journal stores what that wrapper returns."""
    backend = sqlite(tmp_path)
    store = backend.checkpoint_store
    journal_at_call: list[Any] = []

    class Marking(Recorder):
        def wrap_tool(self, run: ActiveRun, execute: Execute, step: int) -> Execute:
            inner = super().wrap_tool(run, execute, step)

            async def marked(call: ToolCall, context: ExecutionContext) -> ToolResult:
                journal_at_call.append((await store.read(run.run_id))[-1].record)
                result = await inner(call, context)
                return msgspec.structs.replace(result, value=f"{result.value} (marked)")

            return marked

    class MarkingFeature(Recording):
        def extension(self, config: Any) -> Recorder:
            self.logs.append([])
            return Marking(self.logs[-1], self.probe)

    recording = MarkingFeature(probe=lambda run: run.is_durably_started)
    agent = create_agent(generate=adding(), tools=[add], extensions=[recording])
    async with backend:
        durable = Durable(backend, run_id="d1")
        async with agent.open_run("2 + 3?", durable=durable) as run:
            result = await run.result()
        journal = [entry.record for entry in await store.read("d1")]
    (log,) = recording.logs
    assert names(log) == EXPECTED
    durably_started = seen(log)
    assert durably_started[("run_started",)] is False  # the journal's turn comes after
    assert durably_started[("step_started", 1)] is True
    (started,) = journal_at_call
    assert isinstance(started, ToolStarted)
    assert started.call_id == "c1"
    (settled,) = [record for record in journal if isinstance(record, ToolSettled)]
    assert settled.result.value == "5 (marked)"
    assert result.steps[0].results[0].value == "5 (marked)"


async def test_a_recovered_run_replays_through_the_journal_not_the_feature(
    tmp_path: Path,
) -> None:
    """A durable run cut during a call that is not idempotent, then recovered: the
    feature's first run ends with ``shutdown=True``; the recovered run is ``resumed``,
    starts at step 2 with step 1 already in ``run.steps``, and the call cut short never
    reaches the feature's tool wrapper again (the journal, outermost, settles it)."""
    backend = sqlite(tmp_path)
    entered, release = trio.Event(), trio.Event()
    executions: list[int] = []

    @tool
    async def once(n: int) -> str:
        """Not idempotent."""
        executions.append(n)
        entered.set()
        await release.wait()
        return f"once {n}"

    def script() -> ScriptedModel:
        def answer(request: GenerateRequest) -> GenerateResponse | str:
            step = 1 + sum(1 for m in request.conversation.messages if m.role == "assistant")
            if step == 1:
                call = ToolCall(id="a", name="add", arguments={"a": 1, "b": 1})
                return GenerateResponse(tool_calls=(call,))
            if step == 2:
                return GenerateResponse(
                    tool_calls=(ToolCall(id="o", name="once", arguments={"n": 2}),)
                )
            return f"done after {step - 1} steps"

        return ScriptedModel(answer)

    first, second = Recording(), Recording(probe=lambda run: (run.resumed, len(run.steps)))
    async with backend:
        durable = Durable(backend, run_id="r1")
        agent = create_agent(generate=script(), tools=[add, once], extensions=[first], name="w")
        with trio.CancelScope() as scope:
            async with agent.open_run("go", durable=durable):
                await entered.wait()
                scope.cancel()  # the worker shuts down mid-call
        again = create_agent(generate=script(), tools=[add, once], extensions=[second], name="w")
        results = await recover(backend, agents={"w": again})
    assert names(first.logs[0])[-1] == ("run_ending", FinishReason.ABORTED, True)
    (log,) = second.logs
    assert names(log) == [
        ("wrap_generate",),
        ("attached",),
        ("start_tasks",),
        ("run_started",),
        ("wrap_loop",),
        ("step_started", 2),
        ("replayed", 2),
        ("generated", 2),
        ("wrap_tool", 2),
        ("step_completed", 2),
        ("step_started", 3),
        ("replayed", 3),
        ("generated", 3),
        ("step_completed", 3),
        ("run_ending", FinishReason.STOP_CONDITION, False),
    ]
    resumed = seen(log)
    assert resumed[("run_started",)] == (True, 0)  # the journal restores the steps after it
    assert resumed[("step_started", 2)] == (True, 1)
    assert executions == [2]  # never twice
    assert results["r1"].steps[1].results[0].outcome == "error"
    assert results["r1"].content == "done after 2 steps"


# -- zero cost, and only what is overridden ---------------------------------------------


async def test_a_run_without_features_has_no_extensions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No feature: ``run.extensions`` is empty; a feature that declines a run (its
    ``extension`` returns None) leaves it empty too."""

    class Declining:
        def extension(self, config: Any) -> None:
            return None

    choices: list[dict[str, Any]] = [{}, {"extensions": [Declining()]}]
    for options in choices:
        async with open_run(
            generate=adding(), stop_when=STOP, conversation=user("2 + 3?"), tools=[add], **options
        ) as run:
            assert run.extensions == ()
            result = await run.result()
        assert result.content == "It is 5."


async def test_a_boundary_not_overridden_is_never_called(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An extension that overrides only ``generated`` is called there and nowhere else
    (the run indexes the boundaries by class, once, and skips the rest)."""
    calls: list[str] = []

    class CountingOnly(Extension):
        def __init__(self) -> None:
            for boundary in (
                "attached",
                "wrap_generate",
                "start_tasks",
                "run_started",
                "wrap_loop",
                "step_started",
                "replayed",
                "wrap_tool",
                "tool_parked",
                "step_completed",
                "run_ending",
            ):
                # Shadow the no-op on the instance: a call would be recorded.
                setattr(self, boundary, lambda *args, _name=boundary, **kwargs: calls.append(_name))

        async def generated(
            self, run: ActiveRun, step: int, response: GenerateResponse, usage: Usage
        ) -> None:
            calls.append(f"generated {step}")

    class Counting:
        def extension(self, config: Any) -> Extension:
            return CountingOnly()

    async with open_run(
        generate=adding(),
        stop_when=STOP,
        conversation=user("2 + 3?"),
        tools=[add],
        extensions=[Counting()],
    ) as run:
        assert len(run.extensions) == 1
        result = await run.result()
    assert result.content == "It is 5."
    assert calls == ["generated 1", "generated 2"]


@pytest.mark.parametrize("value", [object(), Extension(), [Recording(), "audit"], print])
async def test_extensions_takes_only_features(value: Any) -> None:
    """A value without ``extension(config)`` (an ``Extension`` itself included: pass
    the feature that makes one) is refused when the run is configured, saying what to
    pass."""
    with pytest.raises(InvalidArgument, match=r"extensions= takes features: objects with an"):
        async with open_run(
            generate=adding(), stop_when=STOP, conversation=user("hi"), extensions=value
        ):
            pass  # pragma: no cover


# -- clean-up, switches and charges ------------------------------------------------------


async def test_a_failing_run_ending_makes_the_result_a_cleanup_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An extension whose ``run_ending`` raises: the run's result is a ``CleanupError``
    (its cause the exception, its ``.result`` the run's own), and the extensions after
    it still end."""

    class Failing(Extension):
        async def run_ending(
            self, run: ActiveRun, result: RunResult, *, shutdown: bool
        ) -> RunResult:
            raise OSError("the audit disk is full")

    class Failure:
        def extension(self, config: Any) -> Extension:
            return Failing()

    after = Recording()
    async with open_run(
        generate=adding(),
        stop_when=STOP,
        conversation=user("2 + 3?"),
        tools=[add],
        extensions=[Failure(), after],
    ) as run:
        with pytest.raises(CleanupError) as raised:
            await run.result()
    error = raised.value
    assert isinstance(error.__cause__, OSError)
    assert "OSError: the audit disk is full" in str(error)
    assert isinstance(error.result, RunResult)
    assert error.result.content == "It is 5."
    assert error.result.finish_reason == FinishReason.STOP_CONDITION
    assert run.ended_result is not None
    assert run.ended_result.finish_reason == FinishReason.ERROR
    assert names(after.logs[0])[-1] == ("run_ending", FinishReason.STOP_CONDITION, False)


class ToOtherModel:
    """A switch to another generate function that stops when it answers, applied by
    the loop at step end."""

    def __init__(self, generate: GenerateFunction, log: list[Any]) -> None:
        self.generate = generate
        self.log = log

    async def apply(self, run: ActiveRun) -> None:
        last = run.conversation.messages[-1]
        self.log.append(("apply", run.current_step, len(run.steps), last.role))
        run.reconfigure(
            msgspec.structs.replace(
                run.config, generate=run.wrap_generate(self.generate), stop_when=(STOP,)
            )
        )

    def replay(self, run: ActiveRun, step: StepResult, *, last: bool) -> None:
        raise AssertionError("only a durable run replays a switch")  # pragma: no cover


async def test_a_switch_a_tool_asks_for_applies_at_the_end_of_its_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run.request_switch`` from a tool: the switch applies once the step's results are
    in the transcript and ``step_completed`` ran, before the next step; the stop
    conditions are not consulted for the step that switched; the next step runs under
    the new configuration (its generate wrapped again); a second request in one step is
    refused."""
    log: list[Any] = []
    other = ScriptedModel(["the other model answers"])

    @tool
    async def switch(context: ToolContext) -> str:
        """Hand over to the other model."""
        run = context.execution.run
        run.request_switch(ToOtherModel(other, log))
        with pytest.raises(InvalidArgument, match="already switched"):
            run.request_switch(ToOtherModel(other, log))
        log.append(("pending", run.pending_switch is not None))
        return "switching"

    class Watching(Recorder):
        async def step_completed(self, run: ActiveRun, step: StepResult) -> None:
            log.append(("step_completed", step.step, run.pending_switch is not None))

    class Watch(Recording):
        def extension(self, config: Any) -> Recorder:
            self.logs.append([])
            return Watching(self.logs[-1], self.probe)

    watch = Watch()
    first = ScriptedModel(
        [GenerateResponse(tool_calls=(ToolCall(id="s", name="switch", arguments={}),))]
    )
    async with open_run(
        generate=first,
        conversation=user("hand over"),
        tools=[switch],
        stop_when=stop_when.tool_called("switch"),  # would stop at step 1 without the switch
        extensions=[watch],
    ) as run:
        result = await run.result()
    assert log == [
        ("pending", True),
        ("step_completed", 1, True),
        ("apply", 1, 1, "tool"),
        ("step_completed", 2, False),
    ]
    assert result.content == "the other model answers"
    assert len(result.steps) == 2
    assert len(other.requests) == 1
    assert [entry for entry in names(watch.logs[0]) if entry[0] == "wrap_generate"] == [
        ("wrap_generate",),
        ("wrap_generate",),
    ]


async def test_charge_adds_usage_to_the_run_and_its_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run.charge`` (what a subagent uses) adds usage to the run and the step in
    flight; ``run.enforce`` ends the run when the charge crosses the budget."""

    @tool
    async def delegate(context: ToolContext) -> str:
        """Pay for work done elsewhere."""
        run = context.execution.run
        status = run.charge(Usage.of(prompt=70, completion=30), step=context.step)
        await run.enforce(status)
        return "delegated"

    def script() -> ScriptedModel:
        return ScriptedModel(
            [
                GenerateResponse(
                    tool_calls=(ToolCall(id="x", name="delegate", arguments={}),),
                    usage=Usage.of(prompt=10, completion=5),
                ),
                GenerateResponse(content="done", usage=Usage.of(prompt=20, completion=5)),
            ]
        )

    async with open_run(
        generate=script(), stop_when=STOP, conversation=user("go"), tools=[delegate]
    ) as run:
        result = await run.result()
    assert result.usage == Usage.of(prompt=100, completion=40)
    assert result.steps[0].usage == Usage.of(prompt=80, completion=35)
    assert result.steps[1].usage == Usage.of(prompt=20, completion=5)

    async with open_run(
        generate=script(),
        stop_when=STOP,
        conversation=user("go"),
        tools=[delegate],
        budget=Budget(max_tokens=100),
    ) as run:
        result = await run.result()
    assert result.finish_reason == FinishReason.BUDGET_EXCEEDED
    assert result.usage.total == 115
    assert len(result.steps) == 1


# -- the boundaries of spending and limits -------------------------------------------------


class PaidFailure(ConnectionError):
    """A failed attempt that was still paid for (a provider error carrying usage)."""

    def __init__(self, usage: Usage) -> None:
        super().__init__("the connection dropped after the model answered")
        self.usage = usage


class Metering(Recorder):
    """A :class:`Recorder` that also overrides the boundaries of spending and limits,
    logging their arguments, and asks for each spend to be settled (logged when the run
    awaits it)."""

    def _settle(self, source: str) -> Any:
        async def settle(run: ActiveRun) -> None:
            self.log.append(("settled", source, run.current_step))

        return settle

    async def step_entered(self, run: ActiveRun, step: int) -> None:
        self._see("step_entered", step)

    def spent(
        self,
        run: ActiveRun,
        step: int | None,
        usage: Usage,
        model: str | None,
        *,
        source: Any,
        detail: Any = None,
    ) -> Any:
        self._see("spent", step, usage.total, model, source, detail)
        return self._settle(source)

    async def before_attempt(self, run: ActiveRun, request: GenerateRequest, attempt: int) -> None:
        self._see("before_attempt", request.step, attempt)

    async def tools_starting(self, run: ActiveRun, step: int, calls: tuple[ToolCall, ...]) -> None:
        self._see("tools_starting", step, tuple(call.id for call in calls))

    async def run_stopped(self, run: ActiveRun, result: RunResult) -> None:
        self._see("run_stopped", result.finish_reason)


class Meter(Recording):
    def extension(self, config: Any) -> Recorder:
        self.logs.append([])
        return Metering(self.logs[-1], self.probe)


async def test_the_boundaries_of_spending_come_in_order_with_their_arguments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``step_entered`` once the step is current and announced; ``before_attempt``
    before each attempt, retries included; ``spent`` for a failed attempt's usage (no
    model), the answer's (its model) and a ``run.charge`` (its step and ``spent=``
    detail); each settle awaited once what it paid for is recorded: a failed attempt's
    before the next attempt, the answer's after ``step.generated`` and before
    ``tools_starting``, a charge's at ``run.enforce``; ``tools_starting`` with the calls
    that will run (not one a hook skipped); ``run_stopped`` before the ``on_run_end``
    hooks and ``run_ending``."""

    @tool
    async def delegate(context: ToolContext) -> str:
        """Pay for work done elsewhere."""
        run = context.execution.run
        await run.enforce(
            run.charge(Usage.of(prompt=7, completion=3), step=context.step, spent="x")
        )
        return "delegated"

    model = ScriptedModel(
        [
            PaidFailure(Usage.of(prompt=4, completion=1)),
            GenerateResponse(
                tool_calls=(
                    ToolCall(id="d", name="delegate", arguments={}),
                    ToolCall(id="skipped", name="add", arguments={"a": 1, "b": 1}),
                ),
                usage=Usage.of(prompt=10, completion=5),
                model="model-a",
            ),
            GenerateResponse(content="done", usage=Usage.of(prompt=20, completion=2)),
        ]
    )
    meter = Meter(probe=lambda run: (run.current_step, run.usage.total))

    def skip(calls: Any, context: Any) -> Any:
        return [call for call in calls if call.id != "skipped"]

    async with open_run(
        generate=model,
        stop_when=STOP,
        conversation=user("go"),
        tools=[delegate, add],
        retry=RetryOptions(max_attempts=2, initial_delay=1, jitter=False),
        before_tool_execution=skip,
        on_run_end=lambda result: meter.logs[0].append(("on_run_end",)),
        extensions=[meter],
    ) as run:
        run.add_listener("step.generated", lambda event: meter.logs[0].append(("event",)))
        result = await run.result()
    assert result.content == "done"
    (log,) = meter.logs
    assert log[5:] == [
        ("step_started", 1, (0, 0)),
        ("step_entered", 1, (1, 0)),
        ("replayed", 1, (1, 0)),
        ("before_attempt", 1, 1, (1, 0)),
        ("spent", 1, 5, None, "failed-attempt", None, (1, 5)),
        ("settled", "failed-attempt", 1),
        ("before_attempt", 1, 2, (1, 5)),
        ("spent", 1, 15, "model-a", "attempt", None, (1, 20)),
        ("generated", 1, (1, 20)),
        ("event",),
        ("settled", "attempt", 1),
        ("tools_starting", 1, ("d",), (1, 20)),
        ("wrap_tool", 1, (1, 20)),
        ("tool", "delegate", (1, 20)),
        ("spent", 1, 10, None, "charge", "x", (1, 30)),
        ("settled", "charge", 1),
        ("step_completed", 1, (1, 30)),
        ("step_started", 2, (1, 30)),
        ("step_entered", 2, (2, 30)),
        ("replayed", 2, (2, 30)),
        ("before_attempt", 2, 1, (2, 30)),
        ("spent", 2, 22, None, "attempt", None, (2, 52)),
        ("generated", 2, (2, 52)),
        ("event",),
        ("settled", "attempt", 2),
        ("step_completed", 2, (2, 52)),
        ("run_stopped", FinishReason.STOP_CONDITION, (2, 52)),
        ("on_run_end",),
        ("run_ending", FinishReason.STOP_CONDITION, False, (2, 52)),
    ]


async def test_a_compactions_summary_is_spent_and_settled_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The summarizing call of a context compaction is spent (``source="compaction"``,
    no model) before the step's first attempt, and settled right away."""
    summarizer = ScriptedModel([GenerateResponse(content="earlier: 0-5", usage=Usage.of(30, 5))])
    history = Conversation()
    for turn in range(6):
        history.append_user_message(f"question {turn} " + "x" * 2000)
        history.append_assistant_message(f"answer {turn} " + "y" * 2000)
    history.append_user_message("last question")
    meter = Meter()
    async with open_run(
        generate=ScriptedModel([GenerateResponse(content="ok", usage=Usage.of(10, 1))]),
        stop_when=STOP,
        conversation=history.current,
        context_management=ContextManagement(
            max_tokens=2_000, strategy=summarize(summarizer, keep_last=1)
        ),
        extensions=[meter],
    ) as run:
        result = await run.result()
    assert result.usage == Usage.of(40, 6)
    assert names(meter.logs[0])[7:12] == [
        ("replayed", 1),
        ("spent", 1, 35, None, "compaction", None),
        ("settled", "compaction"),
        ("before_attempt", 1, 1),
        ("spent", 1, 11, None, "attempt", None),
    ]


async def test_the_boundaries_of_spending_are_never_called_unless_overridden(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run whose one extension overrides none of ``step_entered``, ``spent``,
    ``before_attempt``, ``tools_starting``, ``run_stopped`` never calls them, not even
    for a failed attempt's usage or a charge: each is skipped by an empty tuple (and
    ``run.charge`` has nothing to settle)."""
    calls: list[str] = []
    boundaries = ("step_entered", "spent", "before_attempt", "tools_starting", "run_stopped")

    class Quiet(Extension):
        def __init__(self) -> None:
            for boundary in boundaries:
                # Shadow the no-op on the instance: a call would be recorded.
                setattr(self, boundary, lambda *args, _name=boundary, **kwargs: calls.append(_name))

    class QuietFeature:
        def extension(self, config: Any) -> Extension:
            return Quiet()

    charged: list[Any] = []

    @tool
    async def delegate(context: ToolContext) -> str:
        """Pay for work done elsewhere."""
        charged.append(context.execution.run.charge(Usage.of(1, 1), step=context.step))
        return "delegated"

    model = ScriptedModel(
        [
            PaidFailure(Usage.of(prompt=4, completion=1)),
            GenerateResponse(
                tool_calls=(ToolCall(id="d", name="delegate", arguments={}),),
                usage=Usage.of(10, 5),
            ),
            GenerateResponse(content="done", usage=Usage.of(20, 2)),
        ]
    )
    async with open_run(
        generate=model,
        stop_when=STOP,
        conversation=user("go"),
        tools=[delegate],
        retry=RetryOptions(max_attempts=2, jitter=False),
        extensions=[QuietFeature()],
    ) as run:
        (extension,) = run.extensions
        result = await run.result()
    assert result.content == "done"
    assert result.usage == Usage.of(35, 9)
    assert charged == [None]
    assert calls == []
    ext = run._state.ext
    assert [getattr(ext, boundary) for boundary in boundaries] == [()] * len(boundaries)
    assert ext.all == (extension,)


class Limiting(Extension):
    """Stops the run at one boundary, with ``run.stop``."""

    def __init__(self, at: str) -> None:
        self.at = at

    async def _stop(self, run: ActiveRun, where: str) -> None:
        if where == self.at:
            run.stop(FinishReason.BUDGET_EXCEEDED, f"limit reached at {where}")
            await trio.lowlevel.checkpoint()

    async def step_entered(self, run: ActiveRun, step: int) -> None:
        await self._stop(run, f"step_entered {step}")

    async def before_attempt(self, run: ActiveRun, request: GenerateRequest, attempt: int) -> None:
        await self._stop(run, f"before_attempt {request.step}")

    async def tools_starting(self, run: ActiveRun, step: int, calls: tuple[ToolCall, ...]) -> None:
        await self._stop(run, f"tools_starting {step}")


class Limit:
    def __init__(self, at: str) -> None:
        self.at = at

    def extension(self, config: Any) -> Extension:
        return Limiting(self.at)


@pytest.mark.parametrize(
    ("at", "model_calls", "outcomes"),
    [
        ("step_entered 2", 1, [["success"]]),
        ("before_attempt 2", 1, [["success"]]),
        ("before_attempt 1", 0, []),
        ("tools_starting 1", 1, [["cancelled", "cancelled"]]),
    ],
)
async def test_an_extension_stops_the_run_where_it_is_called(
    autojump_clock: trio.testing.MockClock, at: str, model_calls: int, outcomes: list[Any]
) -> None:
    """``run.stop`` in ``step_entered`` or ``before_attempt`` ends the run before the
    model is called; in ``tools_starting``, before any of the step's calls runs (each is
    settled ``cancelled``). The run ends with the reason given."""
    ran: list[str] = []

    @tool
    async def note(text: str) -> str:
        """Note something."""
        ran.append(text)
        return text

    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(
                    ToolCall(id="a", name="note", arguments={"text": "a"}),
                    ToolCall(id="b", name="note", arguments={"text": "b"}),
                )
                if at == "tools_starting 1"
                else (ToolCall(id="a", name="note", arguments={"text": "a"}),)
            ),
            "never",
        ]
    )
    async with open_run(
        generate=model,
        stop_when=STOP,
        conversation=user("go"),
        tools=[note],
        extensions=[Limit(at)],
    ) as run:
        result = await run.result()
    assert result.finish_reason == FinishReason.BUDGET_EXCEEDED
    assert result.abort_reason == f"limit reached at {at}"
    assert model.calls == model_calls
    assert [[r.outcome for r in step.results] for step in result.steps] == outcomes
    assert ran == (["a"] if outcomes == [["success"]] else [])


async def test_a_deadline_an_extension_adds_says_why_when_it_ends_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run.add_deadline`` from ``run_started`` (measured from ``run.started_at``)
    bounds the run scope; the function given as its message is asked, once, only when
    that deadline ended the run; ``run_stopped`` then sees the result, and an exception
    there makes the run's result that error."""
    asked: list[float] = []

    class Deadline(Extension):
        async def run_started(self, run: ActiveRun) -> ResumePoint | None:
            assert run.started_at is not None
            run.add_deadline(run.started_at + 30, FinishReason.BUDGET_EXCEEDED, self.why)
            return None

        def why(self) -> str:
            asked.append(trio.current_time())
            return "out of time"

        async def run_stopped(self, run: ActiveRun, result: RunResult) -> None:
            raise RuntimeError(f"could not report: {result.abort_reason}")

    class WithDeadline:
        def extension(self, config: Any) -> Extension:
            return Deadline()

    @tool
    async def wait(seconds: float) -> str:
        """Wait."""
        await trio.sleep(seconds)
        return "waited"

    def script() -> ScriptedModel:
        return ScriptedModel(
            [
                GenerateResponse(
                    tool_calls=(ToolCall(id="w", name="wait", arguments={"seconds": 3600}),)
                ),
            ]
        )

    start = trio.current_time()
    async with open_run(
        generate=script(),
        stop_when=STOP,
        conversation=user("go"),
        tools=[wait],
        extensions=[WithDeadline()],
    ) as run:
        result = await run.result()
    assert asked == [start + 30]
    assert run.started_at == start
    assert result.finish_reason == FinishReason.ERROR
    assert result.abort_reason == "out of time"
    assert isinstance(result.error, RuntimeError)
    assert str(result.error) == "could not report: out of time"
    assert result.steps[0].results[0].outcome == "cancelled"

    asked.clear()
    with pytest.raises(InvalidArgument, match="a failure is raised"):
        run.stop(FinishReason.ERROR, "no")
