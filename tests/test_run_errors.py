"""Errors raise where users await, and misuse says what to do.

``await agent.run(...)`` raises ``RunFailed`` for a run that ends in ``"error"``; a sync
``generate`` is refused; ``KeyboardInterrupt`` and ``SystemExit`` leave runs and
sessions as themselves; a call from asyncio says operative runs under Trio; a run block
used without ``async with`` says how to use it; misspelt options and model strings get
a did-you-mean.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import re
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import operative
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    OperativeError,
    ToolCall,
    create_agent,
    create_lazy_agent,
    open_run,
)
from operative.errors import RunFailed, TrioRequiredError
from operative.kvstore import MemoryStore
from operative.sessions import create_session_store, open_session

PRIVATE = re.compile(r"_RunBlock|RunBlock|_AsyncGeneratorContextManager|\bdrive\b|\b_[a-z]")
"""What no message a user can trigger may name: the run block's class or the loop's
coroutine (a private name starts with an underscore)."""


async def answer(request: GenerateRequest) -> GenerateResponse:
    return GenerateResponse(content="hi")


async def crash(request: GenerateRequest) -> GenerateResponse:
    return GenerateResponse(content=str(1 / 0))


def user(text: str) -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


# -- agent.run raises RunFailed -----------------------------------------------------------


async def test_a_crashing_generate_makes_agent_run_raise_run_failed() -> None:
    agent = create_agent(generate=crash)
    with pytest.raises(RunFailed) as caught:
        await agent.run("hi")
    failed = caught.value
    assert isinstance(failed, OperativeError)
    assert isinstance(failed.__cause__, ZeroDivisionError)
    assert failed.result.finish_reason == "error"
    assert failed.result.error is failed.__cause__
    assert failed.result.run_id in str(failed)
    assert "ZeroDivisionError: division by zero" in str(failed)
    assert "open_run" in str(failed)  # says how to get the result without raising


async def test_the_run_block_keeps_the_error_result_and_unwrap_raises() -> None:
    """Inside open_run, run.result() is the specification's: an errored result."""
    agent = create_agent(generate=crash)
    async with agent.open_run("hi") as run:
        result = await run.result()
    assert result.finish_reason == "error"
    assert isinstance(result.error, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):
        await run.unwrap()


async def test_agent_run_with_tasks_beside_the_loop_raises_run_failed_too() -> None:
    agent = create_agent(generate=crash)
    with pytest.raises(RunFailed):
        await agent.run("hi", abort_on=trio.Event())


async def test_a_subagent_without_a_parent_still_answers_with_the_errored_result() -> None:
    from operative.multiagent import run_subagent

    result = await run_subagent(create_agent(generate=crash), "hi", None)
    assert result.finish_reason == "error"


# -- generate must be async ---------------------------------------------------------------


def sync_generate(request: GenerateRequest) -> GenerateResponse:
    return GenerateResponse(content="hi")


class SyncCall:
    def __call__(self, request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(content="hi")


class AsyncCall:
    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(content="hi")


def logged(
    function: Callable[[GenerateRequest], Awaitable[GenerateResponse]],
) -> Callable[[GenerateRequest], Awaitable[GenerateResponse]]:
    @functools.wraps(function)
    def wrapper(request: GenerateRequest) -> Awaitable[GenerateResponse]:
        return function(request)

    return wrapper


@pytest.mark.parametrize(
    "generate",
    [sync_generate, SyncCall(), lambda request: "hi", functools.partial(sync_generate)],
    ids=["function", "sync __call__", "lambda", "partial"],
)
async def test_create_agent_and_open_run_refuse_a_sync_generate(generate: Any) -> None:
    with pytest.raises(InvalidArgument, match="async def") as caught:
        create_agent(generate=generate)
    assert not PRIVATE.search(str(caught.value))
    with pytest.raises(InvalidArgument, match="async def"):
        open_run(generate=generate, conversation=user("hi"))


def test_create_agent_refuses_what_is_not_callable() -> None:
    with pytest.raises(InvalidArgument, match="async function"):
        create_agent(generate=42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "generate",
    [
        answer,
        AsyncCall(),
        functools.partial(answer),
        logged(answer),
    ],
    ids=["async def", "async __call__", "partial", "decorated"],
)
async def test_async_generates_are_taken(generate: Any) -> None:
    result = await create_agent(generate=generate).run("hi")
    assert result.content == "hi"


# -- KeyboardInterrupt and SystemExit leave as themselves ---------------------------------


def _interrupting_agent(exc: type[BaseException]) -> operative.Agent:
    @operative.tool
    async def interrupt() -> str:
        """Stand in for Ctrl-C (or sys.exit) landing in a tool."""
        raise exc

    script = [
        GenerateResponse(tool_calls=(ToolCall(id="c1", name="interrupt", arguments="{}"),)),
        GenerateResponse(content="done"),
    ]

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return script[request.step - 1]

    return create_agent(generate=generate, tools=[interrupt])


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
async def test_an_interrupt_leaves_runs_as_itself(exc: type[BaseException]) -> None:
    agent = _interrupting_agent(exc)
    with pytest.raises(exc):
        await agent.run("go")
    with pytest.raises(exc):  # with a task beside the loop (the run's nursery)
        await agent.run("go", abort_on=trio.Event())
    with pytest.raises(exc):
        async with agent.open_run("go") as run:
            await run.result()
    with pytest.raises(exc):
        async with agent.open_run("go", abort_on=trio.Event()):
            pass


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
async def test_an_interrupt_leaves_a_session_as_itself(exc: type[BaseException]) -> None:
    agent = _interrupting_agent(exc)
    store = create_session_store(MemoryStore())
    with pytest.raises(exc):
        async with open_session("s", store=store, agent=agent) as handle:
            await handle.run("go")


# -- operative runs under Trio -------------------------------------------------------------


def test_a_run_from_asyncio_says_operative_runs_under_trio() -> None:
    agent = create_agent(generate=answer)

    async def run() -> None:
        await agent.run("hi")

    async def block() -> None:
        async with agent.open_run("hi"):
            pass

    lazy = create_lazy_agent(lambda: agent)

    async def lazy_run() -> None:
        await lazy.run("hi")

    async def lazy_block() -> None:
        async with lazy.open_run("hi"):
            pass

    for attempt in (run, block, lazy_run, lazy_block):
        with pytest.raises(TrioRequiredError) as caught:
            asyncio.run(attempt())
        message = str(caught.value)
        assert isinstance(caught.value, OperativeError)
        assert "operative runs under Trio" in message
        assert "from asyncio" in message
        assert "trio.run(main)" in message
        assert "trio-asyncio" in message


# -- a run block is entered with async with -----------------------------------------------


async def test_a_lazy_agents_block_used_without_async_with_says_how_to_use_it() -> None:
    block = create_lazy_agent(lambda: create_agent(generate=answer)).open_run("hi")
    with pytest.raises(InvalidArgument, match=r"async with agent\.open_run\(\.\.\.\) as run"):
        await block  # type: ignore[misc]
    with pytest.raises(AttributeError, match=r"then run\.events"):
        block.events  # type: ignore[attr-defined]  # noqa: B018
    async with block as run:
        assert (await run.result()).content == "hi"


async def test_a_run_block_used_without_async_with_says_how_to_use_it() -> None:
    agent = create_agent(generate=answer)
    for block in (agent.open_run("hi"), open_run(generate=answer, conversation=user("hi"))):
        messages = []
        with pytest.raises(InvalidArgument) as awaited:
            await block  # type: ignore[misc]
        messages.append(str(awaited.value))
        for name in ("events", "result", "run_id"):
            with pytest.raises(AttributeError) as read:
                getattr(block, name)
            messages.append(str(read.value))
            assert f"run.{name}" in str(read.value)
        with pytest.raises(InvalidArgument) as entered, block:  # type: ignore[attr-defined]
            pass
        messages.append(str(entered.value))
        with pytest.raises(InvalidArgument) as iterated:
            async for _ in block:  # type: ignore[attr-defined]
                pass
        messages.append(str(iterated.value))
        messages.append(repr(block))
        for message in messages:
            assert "async with agent.open_run(...) as run" in message
            assert not PRIVATE.search(message), message
        async with block as run:  # still usable the right way
            assert (await run.result()).content == "hi"
        with pytest.raises(InvalidArgument, match="entered already"):
            async with block:
                pass


def test_forgotten_awaits_warn_about_public_names_only() -> None:
    agent = create_agent(generate=answer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.open_run("hi")  # never entered
        agent.run("hi")  # type: ignore[unused-coroutine]  # never awaited
        open_run(generate=answer, conversation=user("hi"))
        gc.collect()
    messages = [str(w.message) for w in caught]
    assert messages == ["coroutine 'Agent.run' was never awaited"]


# -- did you mean ---------------------------------------------------------------------------


def test_a_misspelt_option_gets_did_you_mean() -> None:
    with pytest.raises(InvalidArgument) as caught:
        create_agent(generate=answer, instruction="Be brief.")  # type: ignore[call-arg]
    message = str(caught.value)
    assert "instruction= (did you mean instructions=?)" in message
    assert "it takes generate, model, instructions" in message  # create_agent's own
    assert "on_run_end" in message  # and the run options
    with pytest.raises(InvalidArgument, match=r"temperature= \(a model setting: pass settings="):
        create_agent(generate=answer, temperature=0.2)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgument, match=r"stop_whn= \(did you mean stop_when=\?\)"):
        open_run(generate=answer, conversation=user("hi"), stop_whn=None)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [
        ("gpt-4o", "did you mean 'openai:gpt-4o'?"),
        ("antropic:claude-haiku-4-5", "did you mean 'anthropic:claude-haiku-4-5'?"),
        ("claude-haiku-4-5", "did you mean 'anthropic:claude-haiku-4-5'?"),
        ("gemini-2.5-flash", "did you mean 'gemini:gemini-2.5-flash'?"),
        ("openia:gpt-4o", "did you mean 'openai:gpt-4o'?"),
        ("antropic", "name the model too, as in 'anthropic:MODEL'"),
    ],
)
async def test_a_misspelt_model_string_gets_did_you_mean(spec: str, suggestion: str) -> None:
    from operative.providers import open_model

    with pytest.raises(InvalidArgument) as caught:
        create_agent(model=spec)
    assert suggestion in str(caught.value)
    with pytest.raises(InvalidArgument) as opened:
        async with open_model(spec):
            pass
    assert suggestion in str(opened.value)
