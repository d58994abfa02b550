"""The extension seam, exercised directly: which boundaries a run calls, in what order,
what each sees of the run, and what a feature may do through them (see
``operative/_core/_extension.py`` and ``operative/_core/_control.py``)."""

from __future__ import annotations

from collections.abc import Callable
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
from operative._core._control import RunControl
from operative._core._extension import BOUNDARIES, Answered, Loop, Parked, Recorded, Step
from operative.budgets import Budget
from operative.context import ContextManagement, summarize
from operative.durable import (
    Durable,
    SqliteCheckpointStore,
    SqliteEngine,
    ToolSettled,
    ToolStarted,
    recover,
)
from operative.extending import Execute, Extension, Feature, ResumePoint, RunConfig
from operative.retry import RetryOptions
from operative.testing import ScriptedModel
from operative.tools import ExecutionContext

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
    """Overrides every boundary but ``spent`` (see :class:`Metering`) and appends what it
    saw to ``log``: each entry ends with what ``probe`` saw of the run then. Each wrapper
    logs its pre-part, and the wrappers around the run and each step their post-part
    too; every run a boundary is given is kept in ``controls``."""

    def __init__(self, log: list[tuple[Any, ...]], probe: Callable[[RunControl], Any]) -> None:
        self.log = log
        self.probe = probe
        self.controls: list[Any] = []

    def _see(self, run: RunControl, *entry: Any) -> None:
        if not any(run is seen for seen in self.controls):
            self.controls.append(run)
        self.log.append((*entry, self.probe(run)))

    def attach(self, run: RunControl, nursery: trio.Nursery) -> None:
        self._see(run, "attach")

    def wrap_run(self, run: RunControl, loop: Loop) -> Loop:
        async def wrapped() -> FinishReason:
            self._see(run, "wrap_run")
            finish = await loop()
            self._see(run, "loop returned", finish)
            return finish

        return wrapped

    def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
        async def wrapped() -> StepResult:
            self._see(run, "wrap_step", step)
            result = await body()
            self._see(run, "stepped", result.step)
            return result

        return wrapped

    def wrap_generate(self, run: RunControl, generate: GenerateFunction) -> GenerateFunction:
        self._see(run, "wrap_generate")

        async def wrapped(request: GenerateRequest) -> GenerateResponse:
            self._see(run, "generate", request.step, request.attempt)
            return await generate(request)

        return wrapped

    async def wrap_tool(
        self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        self._see(run, "wrap_tool", step, tuple(call.id for call in calls))

        async def wrapped(call: ToolCall, context: ExecutionContext) -> ToolResult:
            self._see(run, "tool", call.name)
            return await execute(call, context)

        return wrapped

    async def recorded(self, run: RunControl, fact: Recorded) -> None:
        if isinstance(fact, Answered):
            self._see(run, "answered", fact.step)
        else:
            assert isinstance(fact, Parked)
            self._see(run, "parked", fact.step, fact.parked)

    async def run_ending(self, run: RunControl, result: RunResult, *, shutdown: bool) -> RunResult:
        self._see(run, "run_ending", result.finish_reason, shutdown)
        return result


class Recording:
    """The feature: one :class:`Recorder` per run, each with a log of its own."""

    def __init__(self, probe: Callable[[RunControl], Any] = lambda run: None) -> None:
        self.probe = probe
        self.logs: list[list[tuple[Any, ...]]] = []
        self.made: list[Recorder] = []

    def make(self, log: list[tuple[Any, ...]]) -> Recorder:
        return Recorder(log, self.probe)

    def extension(self, config: Any) -> Recorder:
        self.logs.append([])
        self.made.append(self.make(self.logs[-1]))
        return self.made[-1]


def names(log: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The log without what the probe saw (each entry's last item)."""
    return [entry[:-1] for entry in log]


def seen(log: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Any]:
    """What the probe saw at each boundary call."""
    return {entry[:-1]: entry[-1] for entry in log}


EXPECTED = [
    ("attach",),
    ("wrap_run",),
    ("wrap_step", 1),
    ("wrap_generate",),
    ("generate", 1, 1),
    ("answered", 1),
    ("wrap_tool", 1, ("c1",)),
    ("tool", "add"),
    ("stepped", 1),
    ("wrap_step", 2),
    ("wrap_generate",),
    ("generate", 2, 1),
    ("answered", 2),
    ("stepped", 2),
    ("loop returned", FinishReason.STOP_CONDITION),
    ("run_ending", FinishReason.STOP_CONDITION, False),
]
"""The boundaries of a two-step run whose first step calls one tool. ``wrap_generate``
wraps each step's attempts, once the step's request is built."""


async def test_the_boundaries_come_in_order(autojump_clock: trio.testing.MockClock) -> None:
    """Every boundary of a run with a tool call, in the order the loop reaches them, each
    given the run's ``RunControl`` (one, not the caller's ``ActiveRun``) and seeing the
    run as it is then: ``wrap_run`` after ``run.started``; a step's pre-part before the
    step is current, its post-part with the step's record not yet kept."""
    recording = Recording(
        probe=lambda run: (run.current_step, len(run.steps), run.started_at is not None)
    )
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
    assert [entry[-1] for entry in log] == [
        (0, 0, False),  # attach: the loop has not started
        (0, 0, True),  # wrap_run: run.started is sent
        (0, 0, True),  # wrap_step 1: before the step's first checkpoint
        (1, 0, True),  # wrap_generate: step 1's attempts
        (1, 0, True),  # generate
        (1, 0, True),  # answered
        (1, 0, True),  # wrap_tool
        (1, 0, True),  # tool
        (1, 0, True),  # stepped 1: its record is not kept yet
        (1, 1, True),  # wrap_step 2: step 1 is kept
        (2, 1, True),
        (2, 1, True),
        (2, 1, True),
        (2, 1, True),
        (2, 2, True),  # loop returned
        (2, 2, True),  # run_ending
    ]
    (recorder,) = recording.made
    (control,) = recorder.controls
    assert type(control) is RunControl  # not the caller's ActiveRun
    assert control.run_id == run.run_id
    assert control.extensions == (recorder,)
    assert control.ended_result is not None
    assert control.ended_result.content == "It is 5."


async def test_wrappers_nest_with_the_last_outermost_and_moments_go_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two extensions, in the order of ``extensions=``: the moments (``attach``,
    ``recorded``, ``run_ending``) call the first, then the second; the wrappers nest with
    the second outermost (its pre-part first, its post-part last); each tool wrapper is
    asked in order, so the last one asked runs the call first."""
    log: list[str] = []

    class Tagged(Extension):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def attach(self, run: RunControl, nursery: trio.Nursery) -> None:
            log.append(f"{self.tag} attach")

        def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
            async def wrapped() -> StepResult:
                log.append(f"{self.tag} step {step} in")
                result = await body()
                log.append(f"{self.tag} step {step} out")
                return result

            return wrapped

        def wrap_generate(self, run: RunControl, generate: GenerateFunction) -> GenerateFunction:
            async def wrapped(request: GenerateRequest) -> GenerateResponse:
                log.append(f"{self.tag} generate")
                return await generate(request)

            return wrapped

        async def wrap_tool(
            self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
        ) -> Execute:
            log.append(f"{self.tag} wrap_tool")

            async def wrapped(call: ToolCall, context: ExecutionContext) -> ToolResult:
                log.append(f"{self.tag} tool")
                return await execute(call, context)

            return wrapped

        async def recorded(self, run: RunControl, fact: Recorded) -> None:
            log.append(f"{self.tag} recorded")

        async def run_ending(
            self, run: RunControl, result: RunResult, *, shutdown: bool
        ) -> RunResult:
            log.append(f"{self.tag} run_ending")
            return result

    class Tag:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def extension(self, config: Any) -> Extension:
            return Tagged(self.tag)

    async with open_run(
        generate=adding(),
        conversation=user("2 + 3?"),
        tools=[add],
        stop_when=STOP,
        extensions=[Tag("A"), Tag("B")],
    ) as run:
        result = await run.result()
    assert result.content == "It is 5."
    assert log == [
        "A attach",
        "B attach",
        "B step 1 in",
        "A step 1 in",
        "B generate",
        "A generate",
        "A recorded",
        "B recorded",
        "A wrap_tool",
        "B wrap_tool",
        "B tool",
        "A tool",
        "A step 1 out",
        "B step 1 out",
        "B step 2 in",
        "A step 2 in",
        "B generate",
        "A generate",
        "A recorded",
        "B recorded",
        "A step 2 out",
        "B step 2 out",
        "A run_ending",
        "B run_ending",
    ]


async def test_a_parked_call_is_reported_as_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call that waits for a person is reported parked (``recorded(Parked(...,
    parked=True))``), then approved (``parked=False``), inside the tool wrapper and
    before the step's post-part."""

    @tool(needs_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    async def approve(pending: Any) -> bool:
        await trio.sleep(5)
        return True

    recording = Recording(probe=lambda run: run.now())
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
    (log,) = recording.logs
    assert names(log)[6:11] == [
        ("wrap_tool", 1, ("d",)),
        ("tool", "delete"),
        ("parked", 1, True),
        ("parked", 1, False),
        ("stepped", 1),
    ]
    at = seen(log)
    assert at[("parked", 1, False)] - at[("parked", 1, True)] == 5  # the person's decision


async def test_a_step_answered_with_a_recorded_answer_does_not_call_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run.answer_with(response)`` in a step's pre-part: the step takes that answer
    (and its usage) instead of calling the model, and the extensions are told it was
    answered as usual; the next step calls the model again."""
    facts: list[Recorded] = []
    recorded_answer = GenerateResponse(
        tool_calls=(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}),),
        usage=Usage.of(prompt=8, completion=2),
    )

    class Replaying(Extension):
        def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
            if step == 1:
                run.answer_with(recorded_answer)
            return body

        async def recorded(self, run: RunControl, fact: Recorded) -> None:
            facts.append(fact)

    class Replay:
        def extension(self, config: Any) -> Extension:
            return Replaying()

    model = ScriptedModel(["It is 5."])
    async with open_run(
        generate=model,
        conversation=user("2 + 3?"),
        tools=[add],
        stop_when=STOP,
        extensions=[Replay()],
    ) as run:
        result = await run.result()
    assert result.content == "It is 5."
    assert model.calls == 1
    assert [request.step for request in model.requests] == [2]
    assert result.steps[0].results[0].value == 5
    assert result.steps[0].usage == Usage.of(prompt=8, completion=2)
    assert [(type(fact), fact.step) for fact in facts] == [(Answered, 1), (Answered, 2)]
    first = facts[0]
    assert isinstance(first, Answered)
    assert first.response is recorded_answer


@pytest.mark.parametrize("check_stop", [True, False])
async def test_a_run_resumed_by_its_wrap_run_goes_on_from_the_resume_point(
    autojump_clock: trio.testing.MockClock, check_stop: bool
) -> None:
    """``run.resume(steps, usage, ResumePoint(...))`` before the loop: the run holds the
    steps and spend given and goes on at ``next_step``; with ``check_stop`` its last step
    is checked against the stop conditions first (it met them: the run ends at once,
    without calling the model)."""
    earlier = StepResult(step=1, content="an earlier answer", usage=Usage.of(3, 1))

    class Resuming(Extension):
        def wrap_run(self, run: RunControl, loop: Loop) -> Loop:
            async def resumed() -> FinishReason:
                run.resume(
                    (earlier,), Usage.of(3, 1), ResumePoint(next_step=2, check_stop=check_stop)
                )
                return await loop()

            return resumed

    class Resume:
        def extension(self, config: Any) -> Extension:
            return Resuming()

    model = ScriptedModel([GenerateResponse(content="a new answer", usage=Usage.of(5, 5))])
    async with open_run(
        generate=model, conversation=user("go"), stop_when=STOP, extensions=[Resume()]
    ) as run:
        result = await run.result()
    assert result.finish_reason == FinishReason.STOP_CONDITION
    if check_stop:
        assert model.calls == 0
        assert result.steps == (earlier,)
        assert result.content == "an earlier answer"
        assert result.usage == Usage.of(3, 1)
    else:
        assert [request.step for request in model.requests] == [2]
        assert [step.step for step in result.steps] == [1, 2]
        assert result.content == "a new answer"
        assert result.usage == Usage.of(8, 6)


# -- the same boundaries around a durable run (SQLite) -----------------------------------


def sqlite(path: Path) -> tuple[SqliteEngine, SqliteCheckpointStore]:
    return SqliteEngine(path / "durable.db"), SqliteCheckpointStore(path / "durable.db")


def durably_started(run: RunControl) -> bool:
    """Whether the run's durable record is committed, as its journal says."""
    (journal,) = [extension for extension in run.extensions if extension.durable]
    started: bool = journal.is_durably_started()  # type: ignore[attr-defined]
    return started


async def test_a_durable_run_calls_the_same_boundaries_with_the_journal_outermost(
    tmp_path: Path,
) -> None:
    """With ``durable=`` the feature sees the same boundaries. The journal is attached
    last, so its wrappers are outermost: its ``wrap_run`` commits the run record before
    the feature's wrapper begins; its tool wrapper commits ``tool.started`` before the
    feature's wrapper runs, and stores what that wrapper returns."""
    engine, store = sqlite(tmp_path)
    journal_at_call: list[Any] = []

    class Marking(Recorder):
        async def wrap_tool(
            self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
        ) -> Execute:
            inner = await super().wrap_tool(run, execute, step, calls)

            async def marked(call: ToolCall, context: ExecutionContext) -> ToolResult:
                journal_at_call.append((await store.read(run.run_id))[-1].record)
                result = await inner(call, context)
                return msgspec.structs.replace(result, value=f"{result.value} (marked)")

            return marked

    class MarkingFeature(Recording):
        def make(self, log: list[tuple[Any, ...]]) -> Recorder:
            return Marking(log, self.probe)

    recording = MarkingFeature(probe=durably_started)
    agent = create_agent(generate=adding(), tools=[add], extensions=[recording])
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="d1")
        async with agent.open_run("2 + 3?", durable=durable) as run:
            result = await run.result()
        journal = [entry.record for entry in await store.read("d1")]
    (log,) = recording.logs
    assert names(log) == EXPECTED
    started = seen(log)
    assert started[("attach",)] is False
    assert started[("wrap_run",)] is True  # the journal's wrap_run began the run first
    assert started[("wrap_step", 1)] is True
    (recorder,) = recording.made
    assert [extension.durable for extension in recorder.controls[0].extensions] == [False, True]
    (at_call,) = journal_at_call
    assert isinstance(at_call, ToolStarted)
    assert at_call.call_id == "c1"
    (settled,) = [record for record in journal if isinstance(record, ToolSettled)]
    assert settled.result.value == "5 (marked)"
    assert result.steps[0].results[0].value == "5 (marked)"


async def test_a_recovered_run_replays_through_the_journal_not_the_feature(
    tmp_path: Path,
) -> None:
    """A durable run cut during a call that is not idempotent, then recovered: the
    feature's first run ends with ``shutdown=True``. The recovered run is ``resumed``;
    the journal's ``wrap_run`` (outermost) has restored step 1 before the feature's
    begins; step 2 is answered from the journal (``run.answer_with``: the model is not
    called, the feature sees no ``generate`` for it but is told it was answered); the
    call cut short never reaches the feature's tool wrapper again (the journal settles
    it)."""
    engine, store = sqlite(tmp_path)
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
    recovered_model = script()
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="r1")
        agent = create_agent(generate=script(), tools=[add, once], extensions=[first], name="w")
        with trio.CancelScope() as scope:
            async with agent.open_run("go", durable=durable):
                await entered.wait()
                scope.cancel()  # the worker shuts down mid-call
        again = create_agent(
            generate=recovered_model, tools=[add, once], extensions=[second], name="w"
        )
        results = await recover(engine=engine, checkpoint_store=store, agents={"w": again})
    assert names(first.logs[0])[-1] == ("run_ending", FinishReason.ABORTED, True)
    (log,) = second.logs
    assert names(log) == [
        ("attach",),
        ("wrap_run",),
        ("wrap_step", 2),
        ("answered", 2),
        ("wrap_tool", 2, ("o",)),
        ("stepped", 2),
        ("wrap_step", 3),
        ("wrap_generate",),
        ("generate", 3, 1),
        ("answered", 3),
        ("stepped", 3),
        ("loop returned", FinishReason.STOP_CONDITION),
        ("run_ending", FinishReason.STOP_CONDITION, False),
    ]
    resumed = seen(log)
    assert resumed[("attach",)] == (True, 0)
    assert resumed[("wrap_run",)] == (True, 1)  # the journal restored step 1 already
    assert resumed[("wrap_step", 2)] == (True, 1)
    assert [request.step for request in recovered_model.requests] == [3]
    assert executions == [2]  # never twice
    assert results["r1"].steps[1].results[0].outcome == "error"
    assert results["r1"].content == "done after 2 steps"


# -- zero cost, and only what is overridden ---------------------------------------------


async def test_a_run_without_features_has_no_extensions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No feature: ``run.extensions`` is empty (as a tool sees the run); a feature that
    declines a run (its ``extension`` returns None) leaves it empty too."""
    extensions: list[Any] = []

    @tool
    async def look(context: ToolContext) -> str:
        """Look at the run."""
        extensions.append(context.execution.run.extensions)
        return "looked"

    class Declining:
        def extension(self, config: Any) -> None:
            return None

    choices: list[dict[str, Any]] = [{}, {"extensions": [Declining()]}]
    for options in choices:
        model = ScriptedModel(
            [GenerateResponse(tool_calls=(ToolCall(id="l", name="look", arguments={}),)), "ok"]
        )
        async with open_run(
            generate=model, stop_when=STOP, conversation=user("look"), tools=[look], **options
        ) as run:
            result = await run.result()
        assert result.content == "ok"
    assert extensions == [(), ()]


class PaidFailure(ConnectionError):
    """A failed attempt that was still paid for (a provider error carrying usage)."""

    def __init__(self, usage: Usage) -> None:
        super().__init__("the connection dropped after the model answered")
        self.usage = usage


async def test_a_boundary_not_overridden_is_never_called(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An extension that overrides only ``recorded`` is called there and nowhere else,
    not even ``spent`` for a failed attempt's usage or a charge (the run indexes the
    boundaries by class, once, and skips the rest: ``run.charge`` has nothing to
    settle)."""
    calls: list[str] = []
    controls: list[RunControl] = []

    class RecordedOnly(Extension):
        def __init__(self) -> None:
            for boundary in BOUNDARIES:
                if boundary != "recorded":
                    # Shadow the no-op on the instance: a call would be recorded.
                    setattr(
                        self,
                        boundary,
                        lambda *args, _name=boundary, **kwargs: calls.append(_name),
                    )

        async def recorded(self, run: RunControl, fact: Recorded) -> None:
            calls.append(f"recorded {fact.step}")
            controls.append(run)

    class Counting:
        def extension(self, config: Any) -> Extension:
            return RecordedOnly()

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
        extensions=[Counting()],
    ) as run:
        result = await run.result()
    assert result.content == "done"
    assert result.usage == Usage.of(35, 9)
    assert charged == [None]
    assert calls == ["recorded 1", "recorded 2"]
    control = controls[0]
    (extension,) = control.extensions
    index = control.state.ext
    assert index.all == (extension,)
    assert [getattr(index, boundary) for boundary in BOUNDARIES] == [
        (extension,) if boundary == "recorded" else () for boundary in BOUNDARIES
    ]


@pytest.mark.parametrize("value", [object(), Extension(), [Recording(), "audit"], print])
async def test_extensions_takes_only_features(value: Any) -> None:
    """A value without ``extension(config)`` (an ``Extension`` itself included: pass
    the feature that makes one) is refused when the run is configured, saying what to
    pass."""
    assert isinstance(Recording(), Feature)
    assert not isinstance(Extension(), Feature)
    with pytest.raises(InvalidArgument, match=r"extensions= takes features: objects with an"):
        async with open_run(
            generate=adding(), stop_when=STOP, conversation=user("hi"), extensions=value
        ):
            pass  # pragma: no cover


# -- the seam stays narrow ---------------------------------------------------------------


def test_the_seam_has_eight_boundaries_and_nothing_else() -> None:
    """At most eight boundaries; ``Extension`` defines them and the two attributes the
    run reads (``durable``, ``unfinished``), no other method."""
    assert len(BOUNDARIES) <= 8
    assert set(BOUNDARIES) == {
        "attach",
        "wrap_run",
        "wrap_step",
        "wrap_generate",
        "wrap_tool",
        "spent",
        "recorded",
        "run_ending",
    }
    public = {name for name in dir(Extension) if not name.startswith("_")}
    assert public == {*BOUNDARIES, "durable", "unfinished"}
    assert Extension.durable is False
    assert Extension.unfinished == ""
    for boundary in BOUNDARIES:
        assert callable(getattr(Extension, boundary))


def test_run_config_names_no_feature() -> None:
    """``RunConfig`` holds the features as one ordered tuple, no field per feature."""
    fields = set(RunConfig.__struct_fields__)
    assert "features" in fields
    assert not fields & {"budget", "durable", "guardrails", "instrumentation", "extensions"}


def test_the_callers_run_has_no_feature_api() -> None:
    """The caller's ``ActiveRun`` is small (at most 20 public members) and holds none of
    what ``RunControl`` gives features."""
    public = {name for name in dir(ActiveRun) if not name.startswith("_")}
    assert len(public) <= 20, sorted(public)
    feature_api = {
        "charge",
        "reconfigure",
        "emit",
        "stop",
        "request_switch",
        "resume",
        "answer_with",
        "add_deadline",
        "enforce",
    }
    assert not public & feature_api
    assert all(hasattr(RunControl, name) for name in feature_api)


# -- clean-up, switches and charges ------------------------------------------------------


async def test_a_failing_run_ending_makes_the_result_a_cleanup_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An extension whose ``run_ending`` raises: the run's result is a ``CleanupError``
    (its cause the exception, its message what the extension's ``unfinished`` says is
    left, its ``.result`` the run's own), and the extensions after it still end."""

    class Failing(Extension):
        unfinished = "the audit record of this run is not written"

        async def run_ending(
            self, run: RunControl, result: RunResult, *, shutdown: bool
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
    assert "the audit record of this run is not written" in str(error)
    assert isinstance(error.result, RunResult)
    assert error.result.content == "It is 5."
    assert error.result.finish_reason == FinishReason.STOP_CONDITION
    assert names(after.logs[0])[-1] == ("run_ending", FinishReason.STOP_CONDITION, False)
    control = after.made[0].controls[0]
    assert control.ended_result is not None
    assert control.ended_result.finish_reason == FinishReason.ERROR
    assert control.ended_result.error is error


class ToOtherModel:
    """A switch to another generate function that stops when it answers, applied by
    the loop at step end."""

    def __init__(self, generate: GenerateFunction, log: list[Any]) -> None:
        self.generate = generate
        self.log = log

    async def apply(self, run: RunControl) -> None:
        last = run.conversation.messages[-1]
        self.log.append(("apply", run.current_step, len(run.steps), last.role))
        run.reconfigure(
            msgspec.structs.replace(run.config, generate=self.generate, stop_when=(STOP,))
        )

    def replay(self, run: RunControl, step: StepResult, *, last: bool) -> None:
        raise AssertionError("only a durable run replays a switch")  # pragma: no cover


async def test_a_switch_a_tool_asks_for_applies_at_the_end_of_its_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run.request_switch`` from a tool: the switch applies once the step's results are
    in the transcript, its wrappers returned its record and ``step.completed`` is sent,
    before the next step; the stop conditions are not consulted for the step that
    switched; the next step runs under the new configuration (its generate wrapped
    again); a second request in one step is refused."""
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
        def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
            async def watched() -> StepResult:
                result = await body()
                log.append(("stepped", result.step, run.pending_switch is not None))
                return result

            return super().wrap_step(run, step, watched)

    class Watch(Recording):
        def make(self, log: list[tuple[Any, ...]]) -> Recorder:
            return Watching(log, self.probe)

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
        run.add_listener("step.completed", lambda event: log.append(("completed", event.step)))
        result = await run.result()
    assert log == [
        ("pending", True),
        ("stepped", 1, True),
        ("completed", 1),
        ("apply", 1, 1, "tool"),
        ("stepped", 2, False),
        ("completed", 2),
    ]
    assert result.content == "the other model answers"
    assert len(result.steps) == 2
    assert len(other.requests) == 1
    assert [entry for entry in names(watch.logs[0]) if entry[0] == "wrap_generate"] == [
        ("wrap_generate",),
        ("wrap_generate",),
    ]
    assert ("generate", 2, 1) in names(watch.logs[0])  # the new generate, wrapped


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


class Metering(Recorder):
    """A :class:`Recorder` that also overrides ``spent``, logging its arguments, and asks
    for each spend to be settled (logged when the run awaits it)."""

    def _settle(self, source: str) -> Any:
        async def settle(run: RunControl) -> None:
            self.log.append(("settled", source, run.current_step))

        return settle

    def spent(
        self,
        run: RunControl,
        step: int | None,
        usage: Usage,
        model: str | None,
        *,
        source: Any,
        detail: Any = None,
    ) -> Any:
        self._see(run, "spent", step, usage.total, model, source, detail)
        return self._settle(source)


class Meter(Recording):
    def make(self, log: list[tuple[Any, ...]]) -> Recorder:
        return Metering(log, self.probe)


async def test_the_boundaries_of_spending_come_in_order_with_their_arguments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The wrapped generate is called for each attempt, retries included; ``spent`` for
    a failed attempt's usage (no model), the answer's (its model) and a ``run.charge``
    (its step and ``spent=`` detail); each settle is awaited once what it paid for is
    recorded: a failed attempt's before the next attempt, the answer's after
    ``recorded(Answered)`` and ``step.generated`` and before ``wrap_tool``, a charge's at
    ``run.enforce``; ``wrap_tool`` is given the calls that will run (not one a hook
    skipped); the loop returns before the ``on_run_end`` hooks, which come before
    ``run_ending``."""

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
    assert names(log[:2]) == [("attach",), ("wrap_run",)]
    assert log[2:] == [
        ("wrap_step", 1, (0, 0)),
        ("wrap_generate", (1, 0)),
        ("generate", 1, 1, (1, 0)),
        ("spent", 1, 5, None, "failed-attempt", None, (1, 5)),
        ("settled", "failed-attempt", 1),
        ("generate", 1, 2, (1, 5)),
        ("spent", 1, 15, "model-a", "attempt", None, (1, 20)),
        ("answered", 1, (1, 20)),
        ("event",),
        ("settled", "attempt", 1),
        ("wrap_tool", 1, ("d",), (1, 20)),
        ("tool", "delegate", (1, 20)),
        ("spent", 1, 10, None, "charge", "x", (1, 30)),
        ("settled", "charge", 1),
        ("stepped", 1, (1, 30)),
        ("wrap_step", 2, (1, 30)),
        ("wrap_generate", (2, 30)),
        ("generate", 2, 1, (2, 30)),
        ("spent", 2, 22, None, "attempt", None, (2, 52)),
        ("answered", 2, (2, 52)),
        ("event",),
        ("settled", "attempt", 2),
        ("stepped", 2, (2, 52)),
        ("loop returned", FinishReason.STOP_CONDITION, (2, 52)),
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
    assert names(meter.logs[0])[2:8] == [
        ("wrap_step", 1),
        ("spent", 1, 35, None, "compaction", None),
        ("settled", "compaction"),
        ("wrap_generate",),
        ("generate", 1, 1),
        ("spent", 1, 11, None, "attempt", None),
    ]


class Limiting(Extension):
    """Stops the run at one place, with ``run.stop``: the pre-part of a step's wrapper,
    the generate wrapper before an attempt, or the tool wrapper."""

    def __init__(self, at: str) -> None:
        self.at = at

    async def _stop(self, run: RunControl, where: str) -> None:
        if where == self.at:
            run.stop(FinishReason.BUDGET_EXCEEDED, f"limit reached at {where}")
            await trio.lowlevel.checkpoint()

    def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
        async def limited() -> StepResult:
            await self._stop(run, f"wrap_step {step}")
            return await body()

        return limited

    def wrap_generate(self, run: RunControl, generate: GenerateFunction) -> GenerateFunction:
        async def limited(request: GenerateRequest) -> GenerateResponse:
            await self._stop(run, f"wrap_generate step {request.step} attempt {request.attempt}")
            return await generate(request)

        return limited

    async def wrap_tool(
        self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        await self._stop(run, f"wrap_tool {step}")
        return execute


class Limit:
    def __init__(self, at: str) -> None:
        self.at = at

    def extension(self, config: Any) -> Extension:
        return Limiting(self.at)


@pytest.mark.parametrize(
    ("at", "model_calls", "outcomes", "started", "aborted"),
    [
        ("wrap_step 2", 1, [["success"]], [1], []),
        ("wrap_generate step 2 attempt 1", 1, [["success"]], [1, 2], [2]),
        ("wrap_generate step 1 attempt 1", 0, [], [1], [1]),
        ("wrap_generate step 1 attempt 2", 1, [], [1], [1]),
        ("wrap_tool 1", 1, [["cancelled", "cancelled"]], [1], [1]),
    ],
    ids=["step-2", "generate-step-2", "generate-step-1", "generate-retry", "tool-step-1"],
)
async def test_an_extension_stops_the_run_where_it_is_called(
    autojump_clock: trio.testing.MockClock,
    at: str,
    model_calls: int,
    outcomes: list[Any],
    started: list[int],
    aborted: list[int],
) -> None:
    """``run.stop`` then a checkpoint ends the run right there, with the reason given:

    - in a step's pre-part (step 2): before the step begins (never announced, nothing
      to repair; step 1 stands);
    - in the generate wrapper, before the model is called: the step has begun and is
      cut (``step.aborted``), with no record since it has no answer; before step 2's
      attempt step 1 stands; before step 1's first attempt the model is never called;
      before step 1's retry, only the failed attempt was (and its usage is kept);
    - in the tool wrapper (step 1): the answer is recorded, and none of the step's calls
      runs: each is settled ``cancelled``.
    """
    ran: list[str] = []

    @tool
    async def note(text: str) -> str:
        """Note something."""
        ran.append(text)
        return text

    retried = at.endswith("attempt 2")
    calls: tuple[ToolCall, ...] = (ToolCall(id="a", name="note", arguments={"text": "a"}),)
    if at == "wrap_tool 1":
        calls += (ToolCall(id="b", name="note", arguments={"text": "b"}),)
    model = ScriptedModel(
        [
            *([PaidFailure(Usage.of(prompt=4, completion=1))] if retried else []),
            GenerateResponse(tool_calls=calls),
            "never",
        ]
    )
    events: list[tuple[str, int]] = []
    async with open_run(
        generate=model,
        stop_when=STOP,
        conversation=user("go"),
        tools=[note],
        retry=RetryOptions(max_attempts=2, initial_delay=1, jitter=False),
        extensions=[Limit(at)],
    ) as run:
        run.add_listener("step.started", lambda event: events.append(("started", event.step)))
        run.add_listener("step.aborted", lambda event: events.append(("aborted", event.step)))
        result = await run.result()
    assert result.finish_reason == FinishReason.BUDGET_EXCEEDED
    assert result.abort_reason == f"limit reached at {at}"
    assert model.calls == model_calls
    assert [[r.outcome for r in step.results] for step in result.steps] == outcomes
    assert ran == (["a"] if outcomes == [["success"]] else [])
    assert [step for kind, step in events if kind == "started"] == started
    assert [step for kind, step in events if kind == "aborted"] == aborted
    assert result.usage.total == (5 if retried else 0)


async def test_a_deadline_an_extension_adds_says_why_when_it_ends_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run.add_deadline`` from ``wrap_run`` (measured from ``run.started_at``) bounds
    the run scope; the function given as its message is asked, once, only when that
    deadline ended the run; ``run_ending`` then sees the result with that reason."""
    asked: list[float] = []
    ended: list[tuple[Any, ...]] = []
    controls: list[RunControl] = []

    class Deadline(Extension):
        def wrap_run(self, run: RunControl, loop: Loop) -> Loop:
            async def bounded() -> FinishReason:
                assert run.started_at is not None
                run.add_deadline(run.started_at + 30, FinishReason.BUDGET_EXCEEDED, self.why)
                controls.append(run)
                return await loop()

            return bounded

        def why(self) -> str:
            asked.append(trio.current_time())
            return "out of time"

        async def run_ending(
            self, run: RunControl, result: RunResult, *, shutdown: bool
        ) -> RunResult:
            ended.append((result.finish_reason, result.abort_reason, shutdown))
            return result

    class WithDeadline:
        def extension(self, config: Any) -> Extension:
            return Deadline()

    @tool
    async def wait(seconds: float) -> str:
        """Wait."""
        await trio.sleep(seconds)
        return "waited"

    model = ScriptedModel(
        [GenerateResponse(tool_calls=(ToolCall(id="w", name="wait", arguments={"seconds": 3600}),))]
    )
    start = trio.current_time()
    async with open_run(
        generate=model,
        stop_when=STOP,
        conversation=user("go"),
        tools=[wait],
        extensions=[WithDeadline()],
    ) as run:
        result = await run.result()
    assert asked == [start + 30]
    (control,) = controls
    assert control.started_at == start
    assert result.finish_reason == FinishReason.BUDGET_EXCEEDED
    assert result.abort_reason == "out of time"
    assert ended == [(FinishReason.BUDGET_EXCEEDED, "out of time", False)]
    assert result.steps[0].results[0].outcome == "cancelled"

    with pytest.raises(InvalidArgument, match="a failure is raised"):
        control.stop(FinishReason.ERROR, "no")
    assert asked == [start + 30]  # asked once
