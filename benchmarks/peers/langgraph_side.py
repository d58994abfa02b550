"""langgraph: the prebuilt ReAct agent (``create_react_agent``: a model node and a
``ToolNode``) over a scripted langchain-core chat model.

langchain-core's ``GenericFakeChatModel`` replays one shared iterator of messages and has
no ``bind_tools``, so it cannot serve thousands of concurrent runs; ``ScriptedChatModel``
below is the same idea (a ``BaseChatModel`` returning prebuilt ``AIMessage``s with
``tool_calls``), choosing each reply from the number of AI messages already in the
conversation. It parses the raw JSON arguments, as a provider integration does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.language_models.chat_models import (  # type: ignore[import-not-found,unused-ignore]
    BaseChatModel,
)
from langchain_core.messages import AIMessage  # type: ignore[import-not-found,unused-ignore]
from langchain_core.outputs import (  # type: ignore[import-not-found,unused-ignore]
    ChatGeneration,
    ChatResult,
)
from langchain_core.tools import tool  # type: ignore[import-not-found,unused-ignore]

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent  # type: ignore[import-not-found,unused-ignore]

NAME = "langgraph"
RUNNER = "asyncio"
CALLS = [0]
sleep = asyncio.sleep


@tool  # type: ignore[untyped-decorator,unused-ignore]
async def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS[0] += 1
    return a + b


@tool  # type: ignore[untyped-decorator,unused-ignore]
async def wait(ms: int) -> int:
    """Sleep ``ms`` milliseconds."""
    await asyncio.sleep(ms / 1000)
    CALLS[0] += 1
    return ms


Reply = tuple[str, list[tuple[str, str, str]]]
"""(content, [(call id, tool name, raw JSON arguments)])."""


class ScriptedChatModel(BaseChatModel):  # type: ignore[misc,unused-ignore]
    script: list[Any]
    latency: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _reply(self, messages: list[Any]) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        content, calls = self.script[turn]
        message = AIMessage(
            content=content,
            tool_calls=[
                {"id": cid, "name": name, "args": json.loads(raw), "type": "tool_call"}
                for cid, name, raw in calls
            ],
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatResult:
        if self.latency:
            await asyncio.sleep(self.latency)
        return self._reply(messages)


_threads = itertools.count()


def graph(script: list[Reply], latency: float, checkpointer: Any = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(
            ScriptedChatModel(script=script, latency=latency),
            tools=[add, wait],
            checkpointer=checkpointer,
        )


def run_graph(agent: Any) -> Awaitable[Any]:
    """One run: the graph's own ``ainvoke`` coroutine, on a thread of its own."""
    config = {"recursion_limit": 200, "configurable": {"thread_id": f"t{next(_threads)}"}}
    return agent.ainvoke({"messages": [("user", "What is 1 + 1?")]}, config)  # type: ignore[no-any-return]


def answer(state: Any) -> str:
    """The run's answer: its last message."""
    return str(state["messages"][-1].content)


def steps_script(steps: int) -> list[Reply]:
    script: list[Reply] = [
        ("", [(f"call_{k}", "add", f'{{"a": {k}, "b": 1}}')]) for k in range(1, steps)
    ]
    script.append(("the answer is 42", []))
    return script


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[Any]]:
    agent = graph(steps_script(steps), latency)
    return lambda: run_graph(agent)


def make_parallel(calls: int, tool_sleep: float) -> Callable[[], Awaitable[Any]]:
    ms = round(tool_sleep * 1000)
    first: Reply = ("", [(f"call_{k}", "wait", f'{{"ms": {ms}}}') for k in range(calls)])
    agent = graph([first, ("done", [])], 0.0)
    return lambda: run_graph(agent)
