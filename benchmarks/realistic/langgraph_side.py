"""langgraph, realistic-adapter variant: the prebuilt ReAct agent
(``create_react_agent``) over a langchain-core ``BaseChatModel`` that builds a fresh
``AIMessage`` each step (its ``tool_calls`` with a mapping of arguments, and its
``usage_metadata``), as a langchain chat-model integration converting a provider's JSON
does; ``peers/langgraph_side.py``'s tools and run."""

from __future__ import annotations

import asyncio
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
from peers.langgraph_side import CALLS, add, answer, run_graph

from . import ANSWER, usage

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent  # type: ignore[import-not-found,unused-ignore]

__all__ = ["CALLS", "NAME", "RUNNER", "answer", "make_steps", "sleep"]

NAME = "langgraph, realistic adapter"
RUNNER = "asyncio"
sleep = asyncio.sleep


def respond(step: int, steps: int) -> Any:
    """Step ``step``'s reply, built now."""
    prompt, completion, total = usage(step)
    spent = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": total}
    if step < steps:
        call = {"id": f"call-{step}", "name": "add", "args": {"a": step, "b": 1}}
        message = AIMessage(
            content="", tool_calls=[{**call, "type": "tool_call"}], usage_metadata=spent
        )
    else:
        message = AIMessage(content=ANSWER, usage_metadata=spent)
    return ChatResult(generations=[ChatGeneration(message=message)])


class RealisticChatModel(BaseChatModel):  # type: ignore[misc,unused-ignore]
    steps: int
    latency: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "realistic"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> RealisticChatModel:
        return self

    def _reply(self, messages: list[Any]) -> ChatResult:
        return respond(1 + sum(isinstance(m, AIMessage) for m in messages), self.steps)

    def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatResult:
        if self.latency:
            await asyncio.sleep(self.latency)
        return self._reply(messages)


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(RealisticChatModel(steps=steps, latency=latency), tools=[add])
    return lambda: run_graph(agent)
