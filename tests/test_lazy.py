"""Lazy agents and lazy generate functions: single-flight loading, failures, early aborts."""

from __future__ import annotations

import functools
import types
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from operative import (
    ActiveRun,
    Agent,
    AgentRunContext,
    Conversation,
    FinishReason,
    InvalidArgument,
    RunnableAgent,
    TextPart,
    create_agent,
)
from operative._core._errors import RunFailed
from operative._lazy._agent import create_lazy_agent, create_lazy_generate
from operative.errors import AgentContractError, AsyncDefinitionLoadError
from operative.testing import ScriptedModel, check_run_invariants


def identity(value: object) -> object:
    return value


async def hang(request: Any) -> str:
    """A model call that never returns (until cancelled)."""
    await trio.sleep_forever()


def has_output(agent: Any) -> bool:
    """Read the live property afresh (a helper, so type narrowing never sticks)."""
    return bool(agent.has_output)


def echo_agent(name: str = "echo") -> tuple[Agent, ScriptedModel]:
    """A real agent whose scripted model echoes the last user message."""
    model = ScriptedModel(lambda request: f"echo: {request.conversation.messages[-1].text}")
    return create_agent(generate=model, name=name, instructions="Echo."), model


async def test_ten_concurrent_runs_share_one_load(autojump_clock: trio.testing.MockClock) -> None:
    """The loader runs once for ten concurrent runs, and never again once loaded."""
    agent, model = echo_agent()
    calls = 0

    async def loader() -> Agent:
        nonlocal calls
        calls += 1
        await trio.sleep(1)  # a slow import
        return agent

    lazy = create_lazy_agent(loader)
    # Structurally a RunnableAgent; its open_run's block gives the loaded agent's run.
    as_runnable: Any = lazy
    assert isinstance(as_runnable, RunnableAgent)
    assert lazy.loads == 0
    results: dict[int, str] = {}

    async def one(index: int) -> None:
        results[index] = (await lazy.run(f"hello {index}")).content

    async with trio.open_nursery() as nursery:
        for index in range(10):
            nursery.start_soon(one, index)
    assert calls == 1 == lazy.loads
    assert results == {i: f"echo: hello {i}" for i in range(10)}
    assert lazy.loaded is agent
    assert (await lazy.run("again")).content == "echo: again"
    assert calls == 1
    assert model.calls == 11


async def test_sync_loaders_and_module_defaults() -> None:
    """A sync loader works, and a module-like value is unwrapped through `default`."""
    agent, _ = echo_agent()
    module = types.ModuleType("agents.echo")
    module.default = agent  # type: ignore[attr-defined]
    for loaded in (agent, module, types.SimpleNamespace(default=agent)):
        lazy = create_lazy_agent(functools.partial(identity, loaded))
        assert (await lazy.run("hi")).content == "echo: hi"
        assert lazy.loaded is agent


async def test_a_failed_load_is_not_cached() -> None:
    """The first run ends with AsyncDefinitionLoadError; the next run loads again."""
    agent, _ = echo_agent()
    attempts: list[int] = []

    async def flaky() -> Agent:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("registry unreachable")
        await trio.lowlevel.checkpoint()
        return agent

    lazy = create_lazy_agent(flaky)
    opening = lazy.open_run("hi")
    async with opening as run:
        assert isinstance(run, ActiveRun)  # a run that ends at once, calling no model
        events = [event async for event in run.events()]
    result = await run.result()
    assert result.finish_reason == FinishReason.ERROR
    assert isinstance(result.error, AsyncDefinitionLoadError)
    assert result.error.kind == "load"
    assert isinstance(result.error.__cause__, ConnectionError)
    assert "registry unreachable" in str(result.error)
    assert result.steps == ()
    assert [m.text for m in result.conversation.messages] == ["hi"]
    assert [e.type for e in events] == ["run.started", "run.error"]
    assert run.snapshot().status == "failed"
    assert opening.snapshot().status == "failed"
    with pytest.raises(AsyncDefinitionLoadError):
        await run.unwrap()
    assert (await lazy.run("hi")).content == "echo: hi"
    assert len(attempts) == 2


async def test_concurrent_runs_share_a_failed_load(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Runs waiting on a load that fails all fail with it; the loader ran once."""
    calls = 0

    async def failing() -> Agent:
        nonlocal calls
        calls += 1
        await trio.sleep(1)
        raise RuntimeError("bad module")

    lazy = create_lazy_agent(failing)
    errors: list[BaseException | None] = []

    async def one() -> None:
        with pytest.raises(RunFailed) as failed:
            await lazy.run("hi")
        errors.append(failed.value.result.error)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    assert calls == 1
    assert len(errors) == 3
    assert all(isinstance(e, AsyncDefinitionLoadError) for e in errors)
    assert all(isinstance(e.__cause__, RuntimeError) for e in errors if e is not None)
    assert len({id(e) for e in errors}) == 3  # one error object per run


async def test_something_that_is_not_an_agent_is_a_contract_error_and_not_retried() -> None:
    """A loader producing a non-agent breaks the contract once and for all."""
    calls = 0

    def loader() -> Any:
        nonlocal calls
        calls += 1
        return {"name": "not an agent"}

    lazy = create_lazy_agent(loader)
    for _ in range(2):
        with pytest.raises(RunFailed) as failed:
            await lazy.run("hi")
        result = failed.value.result
        assert isinstance(failed.value.__cause__, AgentContractError)
        assert result.finish_reason == FinishReason.ERROR
        assert isinstance(result.error, AgentContractError)
        assert result.error.code == "INVALID_AGENT_HANDLE"
        assert "dict" in str(result.error)
    assert calls == 1
    with pytest.raises(AgentContractError):
        await lazy.load()


async def test_has_output_and_name_are_live() -> None:
    """Provisional values before the load, the loaded agent's afterwards."""

    class Answer(msgspec.Struct):
        value: int

    plain, _ = echo_agent("plain")
    lazy = create_lazy_agent(lambda: plain, has_output=True)
    assert has_output(lazy) is True
    assert lazy.name == "(lazy agent)"
    await lazy.load()
    assert has_output(lazy) is False
    assert lazy.name == "plain"

    structured = create_agent(generate=ScriptedModel(['{"value": 7}']), output=Answer)
    typed = create_lazy_agent(lambda: structured, name="answers")
    assert has_output(typed) is False
    async with typed.open_run("seven?") as run:
        assert await run.output() == Answer(value=7)
    assert has_output(typed) is True
    assert typed.name == "answers"
    assert "loaded" in repr(typed)


async def test_an_abort_before_the_load_never_runs_the_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Abort while loading: no agent run, an honest aborted result, one run.aborted event.

    The block is entered (and the definition loads) in one task; another aborts the run
    through what open_run returned, which says ``starting`` until then."""
    agent, model = echo_agent()
    started = trio.Event()

    async def slow() -> Agent:
        started.set()
        await trio.sleep(3600)
        return agent

    lazy = create_lazy_agent(slow)
    seen: list[str] = []
    opening = lazy.open_run("hello")
    assert opening.snapshot().status == "starting"

    async def leave() -> None:
        await started.wait()
        assert opening.snapshot().status == "starting"
        opening.abort("the user left")
        opening.abort("twice")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leave)
        async with opening as run:
            run.add_listener("*", lambda event: seen.append(event.type))
            stream = run.events()
            events = [event async for event in stream]
    result = await run.result()
    assert model.calls == 0
    assert result.finish_reason == FinishReason.ABORTED
    assert result.abort_reason == "the user left"
    assert result.steps == ()
    assert result.usage.total == 0
    assert result.run_id == opening.run_id == run.run_id
    assert isinstance(result.conversation, Conversation)
    assert [(m.role, m.text) for m in result.conversation.messages] == [("user", "hello")]
    assert [e.type for e in events] == seen == ["run.started", "run.aborted"]
    assert events[-1].reason == "the user left"
    assert run.snapshot().status == "aborted"
    assert opening.snapshot().status == "aborted"
    assert opening.snapshot().terminal
    assert opening.run is None  # no agent's run ever existed
    assert lazy.loaded is None  # the load was abandoned with the run
    with pytest.raises(InvalidArgument, match="no output type"):
        await run.output()
    assert trio.current_time() < 1


async def test_an_abort_before_entering_never_loads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Aborted before its block was entered, the run never calls the loader."""
    lazy = create_lazy_agent(lambda: echo_agent()[0])
    opening = lazy.open_run("hi")
    opening.abort("not now")
    async with opening as run:
        pass
    assert (await run.result()).abort_reason == "not now"
    assert lazy.loads == 0
    with pytest.raises(InvalidArgument, match="entered already"):
        async with opening:
            pass


async def test_an_abort_before_load_leaves_other_runs_loading(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One run's abort abandons only its wait; another run's load goes on."""
    agent, _ = echo_agent()

    async def slow() -> Agent:
        await trio.sleep(10)
        return agent

    lazy = create_lazy_agent(slow)
    outcome: dict[str, Any] = {}
    impatient = lazy.open_run("leave")

    async def patient() -> None:
        outcome["patient"] = await lazy.run("stay")

    async def leave() -> None:
        await trio.sleep(2)
        impatient.abort()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(patient)
        await trio.sleep(1)
        nursery.start_soon(leave)
        async with impatient as run:
            pass
        outcome["impatient"] = await run.result()
    assert outcome["impatient"].finish_reason == FinishReason.ABORTED
    assert outcome["patient"].content == "echo: stay"
    assert lazy.loads == 1


async def test_an_abort_after_the_load_goes_to_the_real_run() -> None:
    """Once the real run exists, abort is forwarded to it, once."""
    agent = create_agent(generate=ScriptedModel(hang))
    lazy = create_lazy_agent(lambda: agent)
    opening = lazy.open_run("hi")
    async with opening as run:
        assert opening.run is run
        async for _ in run.events("step.started"):
            opening.abort("enough")
            opening.abort("again")
            run.abort("and again")
    result = await run.result()
    assert result.finish_reason == FinishReason.ABORTED
    assert result.abort_reason == "enough"
    assert result.run_id == run.run_id == opening.run_id


async def test_events_before_resolution_reach_an_iterating_consumer() -> None:
    """The block gets the loaded agent's run before its loop starts: a stream that
    iterates there sees the whole run, in order, and so do listeners."""
    agent, _ = echo_agent()

    async def loader() -> Agent:
        await trio.lowlevel.checkpoint()
        return agent

    lazy = create_lazy_agent(loader)
    listened: list[str] = []
    async with lazy.open_run("hi") as run:
        assert isinstance(run, ActiveRun)
        remove_early = run.add_listener("step.started", listened.append)
        removed = run.add_listener("run.started", listened.append)
        removed()
        async with run.events() as stream:
            events = [event async for event in stream]
    result = await run.result()
    remove_early()
    check_run_invariants(result, events)
    assert events[0].type == "run.started"
    assert events[-1].type == "run.completed"
    assert len(listened) == 1
    assert run.snapshot().status == "completed"


async def test_a_stream_that_never_iterates_holds_nothing() -> None:
    """Only an iterating consumer makes the run hold events."""
    agent, _ = echo_agent()
    lazy = create_lazy_agent(lambda: agent)
    async with lazy.open_run("hi") as run:
        run.events()  # never iterated
        unused = run.events("run.completed")
        assert unused.dropped == 0
        assert not run._control.wants("run.completed")
    assert (await run.result()).content == "echo: hi"


async def test_input_and_context_are_snapshotted_at_call_time() -> None:
    """Mutating the input list after open_run() never reaches the run."""
    agent, model = echo_agent()
    lazy = create_lazy_agent(lambda: agent)
    parts = [TextPart(text="first")]
    manager = lazy.open_run(parts, context=AgentRunContext(agent_name="renamed"))
    parts.append(TextPart(text="second"))
    async with manager as run:
        started = [e async for e in run.events("run.started")]
    assert len(model.requests[0].conversation.messages[-1].content) == 1
    assert started[0].agent_name == "renamed"
    with pytest.raises(InvalidArgument):
        lazy.open_run(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        lazy.open_run("hi", context={"agent_name": "x"})  # type: ignore[arg-type]


async def test_a_history_input_is_used_as_it_is() -> None:
    """A ConversationHistory input continues that history (no instructions added)."""
    agent, _ = echo_agent()
    seed = Conversation()
    seed.append_user_message("from history")
    lazy = create_lazy_agent(lambda: agent)
    result = await lazy.run(seed.current)
    assert [m.role for m in result.conversation.messages] == ["user", "assistant"]


async def test_an_error_in_the_block_aborts_the_run_and_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Like open_run: the run is aborted and the block's exception comes out."""
    lazy = create_lazy_agent(lambda: create_agent(generate=ScriptedModel(hang)))
    with pytest.raises(KeyError):
        async with lazy.open_run("hi") as run:
            raise KeyError("host bug")
    assert (await run.result()).finish_reason == FinishReason.ABORTED


async def test_caller_cancellation_before_the_load_is_recorded_and_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An outer deadline cancels the load; the loading run records aborted; nothing is
    swallowed."""

    async def slow() -> Agent:
        await trio.sleep(100)
        raise AssertionError("never loaded")

    lazy = create_lazy_agent(slow)
    opening = lazy.open_run("hi")
    with trio.move_on_after(5) as scope:
        async with opening:
            raise AssertionError("the block waits for the definition")
    assert scope.cancelled_caught
    assert opening.snapshot().status == "aborted"
    assert opening.run is None
    assert lazy.loads == 1
    assert lazy.loaded is None


async def test_caller_cancellation_after_the_load_takes_the_real_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelled mid-run: the real run's own aborted result is the handle's result."""
    agent = create_agent(generate=ScriptedModel(hang))
    lazy = create_lazy_agent(lambda: agent)
    with trio.move_on_after(5):
        async with lazy.open_run("hi") as run:
            await trio.sleep_forever()
    result = await run.result()
    assert result.finish_reason == FinishReason.ABORTED
    assert result.run_id == run.run_id


def test_create_lazy_agent_validates_its_arguments() -> None:
    """A non-callable loader, a non-bool has_output or an empty name is refused."""
    with pytest.raises(InvalidArgument, match="loader"):
        create_lazy_agent("agents.echo")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="has_output"):
        create_lazy_agent(lambda: None, has_output=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="name"):
        create_lazy_agent(lambda: None, name="")
    with pytest.raises(InvalidArgument, match="loader"):
        create_lazy_generate(None)  # type: ignore[arg-type]


# -- lazy generate --------------------------------------------------------------------


async def test_lazy_generate_loads_once_and_retries_a_failed_load() -> None:
    """The generate function loads on the first call; a failed load is tried again."""
    model = ScriptedModel(lambda request: "loaded answer")
    attempts: list[int] = []

    async def loader() -> Any:
        attempts.append(1)
        await trio.lowlevel.checkpoint()
        if len(attempts) == 1:
            raise ImportError("no module named vendor_sdk")
        return types.SimpleNamespace(default=model)

    generate = create_lazy_generate(loader)
    agent = create_agent(generate=generate)
    with pytest.raises(RunFailed) as raised:
        await agent.run("hi")
    failed = raised.value.result
    assert failed.finish_reason == FinishReason.ERROR
    assert isinstance(failed.error, AsyncDefinitionLoadError)
    assert generate.loaded is None
    assert (await agent.run("hi")).content == "loaded answer"
    assert (await agent.run("again")).content == "loaded answer"
    assert generate.loads == len(attempts) == 2
    assert generate.loaded is model


async def test_lazy_generate_rejects_what_is_not_callable() -> None:
    """A loader producing a non-callable is an AgentContractError, not retried."""
    generate = create_lazy_generate(lambda: "gpt-4")
    agent = create_agent(generate=generate)
    for _ in range(2):
        with pytest.raises(RunFailed) as raised:
            await agent.run("hi")
        assert isinstance(raised.value.result.error, AgentContractError)
    assert generate.loads == 1


class NotAHandle:
    """An agent whose open_run yields something that is not a run handle."""

    name = "broken"
    has_output = False

    async def run(self, input: Any, *, context: Any = None) -> Any:
        raise AssertionError("not called")

    def open_run(self, input: Any, *, context: Any = None) -> Any:
        return _Yields(object())


class _Yields:
    def __init__(self, value: object) -> None:
        self.value = value

    async def __aenter__(self) -> object:
        await trio.lowlevel.checkpoint()
        return self.value

    async def __aexit__(self, *exc: object) -> None:
        await trio.lowlevel.checkpoint()


class NotAManager(NotAHandle):
    def open_run(self, input: Any, *, context: Any = None) -> Any:
        return object()


async def test_an_agent_whose_run_is_not_a_run_handle_breaks_the_contract() -> None:
    """open_run must be an async context manager yielding a run handle."""
    for broken in (NotAHandle(), NotAManager()):
        async with create_lazy_agent(functools.partial(identity, broken)).open_run("hi") as run:
            pass
        result = await run.result()
        assert result.finish_reason == FinishReason.ERROR
        assert isinstance(result.error, AgentContractError)
