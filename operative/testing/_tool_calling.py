"""``ToolCallingModel``: calls every offered tool once, then reports what came back."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
import trio

from .._core._errors import InvalidArgument
from .._core._model import GenerateRequest, GenerateResponse
from .._core._types import ToolCall, ToolSpec, Usage
from ._schema_values import RandomSource, SchemaValues

__all__ = ["ToolCallingModel"]


class ToolCallingModel:
    """A ``GenerateFunction`` that exercises every tool it is offered.

    When the latest message of the transcript is not a tool result (the first step of
    a turn), it calls each offered tool once (or only those named in ``tools``), with
    arguments drawn from the tool's JSON Schema. On the next step it answers with
    ``text``, or by default a JSON object mapping each tool it called to the text of its
    result, so a test can see what every tool returned.

    Arguments are reproducible: they depend only on ``seed``, the tool's name and its
    schema, never on the order tools are offered in or on earlier calls.
    :meth:`arguments_for` shows what a tool will be sent. Every request is recorded in
    ``requests``.

    Args:
        seed: the seed the arguments are drawn from.
        tools: the names of the tools to call (default: every offered tool).
        text: the final answer (default: the JSON summary of the results).
        usage: the usage every response reports (default: none).
        delay: seconds of (trio, so virtual in tests) time each call takes.
    """

    __test__ = False

    def __init__(
        self,
        *,
        seed: int = 0,
        tools: Iterable[str] | None = None,
        text: str | None = None,
        usage: Usage | None = None,
        delay: float = 0.0,
    ) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise InvalidArgument(f"seed must be an int, not {seed!r}")
        if isinstance(tools, str):
            raise InvalidArgument("tools is a list of tool names, not one str")
        if not delay >= 0:
            raise InvalidArgument(f"delay must be seconds >= 0, not {delay!r}")
        self.seed = seed
        self.tools = frozenset(tools) if tools is not None else None
        self.text = text
        self.usage = usage
        self.delay = delay
        self.requests: list[GenerateRequest] = []
        """Every request the model saw, in order."""

    def __repr__(self) -> str:
        return f"ToolCallingModel(seed={self.seed})"

    def arguments_for(self, spec: ToolSpec) -> dict[str, object]:
        """The arguments this model sends to the tool ``spec`` describes."""
        source = RandomSource(f"{self.seed}/{spec.name}")
        value = SchemaValues(spec.input_schema).draw(source)
        if not isinstance(value, dict):
            raise InvalidArgument(
                f"tool {spec.name!r} has an input schema whose values are not objects"
            )
        return value

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        self.requests.append(request)
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        messages = request.conversation.messages
        if messages and messages[-1].role == "tool":
            results: dict[str, str] = {}
            for message in reversed(messages):
                if message.role != "tool":
                    break
                results[message.tool_name or message.tool_call_id or "?"] = message.text
            answer = self.text
            if answer is None:
                answer = msgspec.json.encode(dict(reversed(results.items()))).decode()
            return GenerateResponse(content=answer, usage=self.usage)
        chosen = [s for s in request.tools if self.tools is None or s.name in self.tools]
        if not chosen:
            return GenerateResponse(content=self.text or "{}", usage=self.usage)
        calls = tuple(
            ToolCall(
                id=f"call_{request.step}_{index}_{spec.name}",
                name=spec.name,
                arguments=self.arguments_for(spec),
            )
            for index, spec in enumerate(chosen)
        )
        return GenerateResponse(tool_calls=calls, usage=self.usage)
