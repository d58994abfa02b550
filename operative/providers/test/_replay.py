"""Recording a provider's streamed deltas, and replaying them on trio's clock."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
import trio

from ..._core._deltas import with_run_sink
from ..._core._errors import InvalidArgument
from ..._core._model import GenerateRequest, GenerateResponse
from ..._core._types import ToolCall, Usage
from .._common import Delta, DeltaCallback, parse_arguments

__all__ = ["StreamChunk", "StreamRecorder", "StreamReplayer"]


class StreamChunk(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded delta and the seconds that passed before it arrived."""

    delta: Delta
    gap: float = 0.0


class StreamRecorder:
    """An ``on_delta`` callback that keeps every delta with the time since the last one.

    Give it to an adapter (``anthropic_generate(..., stream=True, on_delta=recorder)``),
    then replay ``recorder.chunks`` with :class:`StreamReplayer`. ``chunks`` encode with
    ``msgspec.json`` to be stored next to the tests.
    """

    __test__ = False

    def __init__(self) -> None:
        self.chunks: list[StreamChunk] = []
        self._last: float | None = None

    def __call__(self, delta: Delta) -> None:
        now = trio.current_time()
        gap = 0.0 if self._last is None else now - self._last
        self._last = now
        self.chunks.append(StreamChunk(delta=delta, gap=gap))


class StreamReplayer:
    """A generate function that replays recorded deltas and returns their assembled answer.

    Each chunk waits its ``gap`` on trio's clock (virtual time under ``MockClock``), then
    goes to ``on_delta``. The answer is what the real adapters assemble from the same
    deltas: ``"text"`` deltas joined into ``content``, ``"tool_arguments"`` deltas
    joined per call (keyed by ``index``; ``call_id`` and ``tool_name`` from whichever
    delta carries them) into ``tool_calls`` in order of first appearance; ``"thinking"``
    deltas are passed on but not part of the content. ``error``, when given, is raised
    after the last chunk (a stream cut off part-way). Every request is recorded in
    ``requests``; each call replays the whole stream.
    """

    __test__ = False

    def __init__(
        self,
        chunks: Iterable[StreamChunk | Delta],
        *,
        on_delta: DeltaCallback | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        stop_reason: str | None = None,
        error: Exception | None = None,
        name: str = "replay",
    ) -> None:
        items: list[StreamChunk] = []
        for chunk in chunks:
            if isinstance(chunk, Delta):
                chunk = StreamChunk(delta=chunk)
            if not isinstance(chunk, StreamChunk):
                raise InvalidArgument(f"StreamReplayer takes StreamChunk or Delta, got {chunk!r}")
            if not chunk.gap >= 0:
                raise InvalidArgument(f"a chunk's gap must be seconds >= 0, got {chunk.gap!r}")
            items.append(chunk)
        if on_delta is not None and not callable(on_delta):
            raise InvalidArgument(f"on_delta must be a callable, got {on_delta!r}")
        if error is not None and not isinstance(error, Exception):
            raise InvalidArgument(f"error must be an exception, got {error!r}")
        self.chunks = tuple(items)
        self.on_delta = on_delta
        self.usage = usage
        self.model = model
        self.stop_reason = stop_reason
        self.error = error
        self.name = name
        self.requests: list[GenerateRequest] = []

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        self.requests.append(request)
        return await self.replay()

    async def replay(self, on_delta: DeltaCallback | None = None) -> GenerateResponse:
        """Play the chunks once (to ``on_delta``, default the constructor's) and assemble."""
        # Like the real adapters: the run being served (if it listens) sees every delta.
        callback = with_run_sink(on_delta if on_delta is not None else self.on_delta)
        texts: list[str] = []
        calls: dict[int, list[str | None]] = {}  # index -> [call_id, tool_name]
        arguments: dict[int, list[str]] = {}
        for chunk in self.chunks:
            if chunk.gap > 0:
                await trio.sleep(chunk.gap)
            else:
                await trio.lowlevel.checkpoint()
            delta = chunk.delta
            if delta.kind == "text":
                texts.append(delta.text)
            elif delta.kind == "tool_arguments":
                slot = calls.setdefault(delta.index, [None, None])
                slot[0] = slot[0] or delta.call_id
                slot[1] = slot[1] or delta.tool_name
                arguments.setdefault(delta.index, []).append(delta.text)
            if callback is not None:
                callback(delta)
        if self.error is not None:
            raise self.error
        tool_calls = tuple(
            ToolCall(
                id=call_id or f"call_{index}",
                name=tool_name or "",
                arguments=parse_arguments("".join(arguments[index])),
            )
            for index, (call_id, tool_name) in calls.items()
        )
        return GenerateResponse(
            content="".join(texts),
            tool_calls=tool_calls,
            usage=self.usage,
            model=self.model,
            stop_reason=self.stop_reason,
        )
