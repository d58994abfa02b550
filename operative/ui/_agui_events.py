"""AG-UI's events: an operative run's events as ``data:`` frames, one JSON object each.

A run opens with ``RUN_STARTED`` and ends with ``RUN_FINISHED`` or ``RUN_ERROR``; nothing
else follows (no ``[DONE]``: the client would fail the run on it).
"""

from __future__ import annotations

import json
import time
from collections.abc import (
    AsyncIterator,
    Iterable,
)
from typing import Any

import msgspec

from .._core._events import Event
from .._core._types import ToolResult, Usage
from ..conversation._message import new_message_id, tool_result_content
from ._agui_input import interrupt_id

__all__ = ["STREAMED", "AguiEncoder", "agui_stream"]

STREAMED = (
    "step.started",
    "generate.retry",
    "step.completed",
    "step.aborted",
    "generate.delta",
    "step.generated",
    "tool-result.validated",
    "run.completed",
    "run.error",
    "run.aborted",
)
"""The run events :func:`agui_stream` reads."""


# -- events -------------------------------------------------------------------------------


def _frame(event: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(event) + b"\n\n"


def _usage(usage: Usage) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "inputTokens": usage.prompt,
        "outputTokens": usage.completion,
        "totalTokens": usage.prompt + usage.completion,
    }
    if usage.reasoning:
        entry["reasoningTokens"] = usage.reasoning
    if usage.cache_read:
        entry["cachedInputTokens"] = usage.cache_read
    if usage.cache_write:
        entry["cacheWriteInputTokens"] = usage.cache_write
    return [entry]


def _iso(milliseconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(milliseconds / 1000))


class AguiEncoder:
    """Turns operative's run events into AG-UI events, one run at a time.

    ``client_tools`` names the tools the client runs: their calls end the run pending
    (``RUN_FINISHED``'s ``pendingToolCallIds``) instead of being interrupts.
    """

    def __init__(self, thread_id: str, run_id: str, client_tools: Iterable[str] = ()) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.client_tools = frozenset(client_tools)
        self.interrupts: list[dict[str, Any]] = []
        self.pending: list[str] = []
        self.finished = False
        self._step: str | None = None
        self._message: str | None = None  # this step's assistant message id
        self._text_open = False
        self._text_sent = False
        self._reasoning: str | None = None  # the open reasoning message's id
        self._calls: dict[str, str] = {}  # streamed call id -> tool name
        self._streamed_by_index: dict[int, str] = {}
        self._ended_calls: set[str] = set()

    def run_started(self, input: dict[str, Any] | None = None) -> bytes:
        """``RUN_STARTED``: always the first event."""
        event: dict[str, Any] = {
            "type": "RUN_STARTED",
            "threadId": self.thread_id,
            "runId": self.run_id,
        }
        if input is not None:
            event["input"] = input
        return _frame(event)

    def tool_result(self, result: ToolResult) -> bytes:
        """``TOOL_CALL_RESULT`` for a settled call."""
        return _frame(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": new_message_id(),
                "toolCallId": result.call_id,
                "content": tool_result_content(result),
                "role": "tool",
            }
        )

    def run_error(self, message: str, code: str | None = None) -> bytes:
        """``RUN_ERROR``: the run failed (open steps, messages and calls are left open,
        as the protocol allows after an error)."""
        self.finished = True
        event: dict[str, Any] = {"type": "RUN_ERROR", "message": message}
        if code:
            event["code"] = code
        return _frame(event)

    def _message_id(self) -> str:
        if self._message is None:
            self._message = new_message_id()
        return self._message

    def _close_reasoning(self) -> list[bytes]:
        if self._reasoning is None:
            return []
        message, self._reasoning = self._reasoning, None
        return [
            _frame({"type": "REASONING_MESSAGE_END", "messageId": message}),
            _frame({"type": "REASONING_END", "messageId": message}),
        ]

    def _close_text(self) -> list[bytes]:
        if not self._text_open:
            return []
        self._text_open = False
        return [_frame({"type": "TEXT_MESSAGE_END", "messageId": self._message_id()})]

    def _start_call(self, call_id: str, name: str) -> bytes:
        self._calls[call_id] = name
        return _frame(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": call_id,
                "toolCallName": name,
                "parentMessageId": self._message_id(),
            }
        )

    def _close_step(self) -> list[bytes]:
        out = self._close_reasoning() + self._close_text()
        for call_id in self._calls:
            if call_id not in self._ended_calls:
                self._ended_calls.add(call_id)
                out.append(_frame({"type": "TOOL_CALL_END", "toolCallId": call_id}))
        if self._step is not None:
            out.append(_frame({"type": "STEP_FINISHED", "stepName": self._step}))
            self._step = None
        return out

    def encode(self, event: Event) -> list[bytes]:
        """The AG-UI events for one run event (often none, sometimes several)."""
        kind = event.type
        out: list[bytes] = []
        if kind == "step.started":
            out += self._close_step()
            self._step = f"step {event.step}"
            self._message = None
            self._text_sent = False
            self._calls = {}
            self._streamed_by_index = {}
            out.append(_frame({"type": "STEP_STARTED", "stepName": self._step}))
        elif kind == "generate.delta":
            out += self._delta(event)
        elif kind == "generate.retry":
            out += self._retrying()
        elif kind == "step.generated":
            out += self._generated(event)
        elif kind == "tool-result.validated":
            out += self._result(event.result)  # type: ignore[attr-defined]
        elif kind in ("step.completed", "step.aborted"):
            out += self._close_step()
        elif kind == "run.completed":
            out += self._close_step()
            out.append(self._finished(event))
        elif kind == "run.error":
            out.append(self.run_error(event.error, event.error_type))  # type: ignore[attr-defined]
        elif kind == "run.aborted":
            out += self._close_step()
            self.finished = True
            out.append(
                _frame(
                    {
                        "type": "RUN_FINISHED",
                        "threadId": self.thread_id,
                        "runId": self.run_id,
                        "outcome": {"type": "cancelled"},
                        "usage": _usage(event.usage),  # type: ignore[attr-defined]
                    }
                )
            )
        return out

    def _retrying(self) -> list[bytes]:
        """A failed attempt's streamed pieces stay as they are (AG-UI cannot take them
        back): its message is closed, its calls are ended and answered as never run, and
        the retry streams into a new message."""
        out = self._close_reasoning() + self._close_text()
        for call_id, name in self._calls.items():
            if call_id not in self._ended_calls:
                self._ended_calls.add(call_id)
                out.append(_frame({"type": "TOOL_CALL_END", "toolCallId": call_id}))
                cut = ToolResult(
                    call_id=call_id,
                    tool_name=name,
                    outcome="cancelled",
                    error="The model's answer failed while writing this call; it did not run.",
                )
                out.append(self.tool_result(cut))
        self._message = None
        self._text_sent = False
        self._calls = {}
        self._streamed_by_index = {}
        return out

    def _delta(self, event: Any) -> list[bytes]:
        out: list[bytes] = []
        if event.kind == "thinking" and event.text:
            if self._reasoning is None:
                self._reasoning = new_message_id()
                out.append(_frame({"type": "REASONING_START", "messageId": self._reasoning}))
                out.append(
                    _frame(
                        {
                            "type": "REASONING_MESSAGE_START",
                            "messageId": self._reasoning,
                            "role": "reasoning",
                        }
                    )
                )
            out.append(
                _frame(
                    {
                        "type": "REASONING_MESSAGE_CONTENT",
                        "messageId": self._reasoning,
                        "delta": event.text,
                    }
                )
            )
            return out
        out += self._close_reasoning()
        if event.kind == "text" and event.text:
            if not self._text_open:
                self._text_open = self._text_sent = True
                out.append(
                    _frame(
                        {
                            "type": "TEXT_MESSAGE_START",
                            "messageId": self._message_id(),
                            "role": "assistant",
                        }
                    )
                )
            out.append(
                _frame(
                    {
                        "type": "TEXT_MESSAGE_CONTENT",
                        "messageId": self._message_id(),
                        "delta": event.text,
                    }
                )
            )
        elif event.kind == "tool_arguments":
            call_id = self._streamed_by_index.get(event.index)
            if call_id is None:
                if event.call_id is None or event.tool_name is None:
                    return out  # not yet known: the whole call is sent at step.generated
                call_id = event.call_id
                self._streamed_by_index[event.index] = call_id
                out.append(self._start_call(call_id, event.tool_name))
            if event.text:
                out.append(
                    _frame({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": event.text})
                )
        return out

    def _generated(self, event: Any) -> list[bytes]:
        out = self._close_reasoning()
        if event.content and not self._text_sent:
            message = self._message_id()
            out.append(
                _frame({"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"})
            )
            out.append(
                _frame(
                    {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": event.content}
                )
            )
            self._text_open = True
        self._text_sent = True
        out += self._close_text()
        for call in event.tool_calls:
            if call.id not in self._calls:
                out.append(self._start_call(call.id, call.name))
                arguments = call.arguments
                text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                out.append(_frame({"type": "TOOL_CALL_ARGS", "toolCallId": call.id, "delta": text}))
            if call.id not in self._ended_calls:
                self._ended_calls.add(call.id)
                out.append(_frame({"type": "TOOL_CALL_END", "toolCallId": call.id}))
        return out

    def _result(self, result: ToolResult) -> list[bytes]:
        if result.outcome == "action-required":
            if result.tool_name in self.client_tools:
                self.pending.append(result.call_id)
                return []
            approval = result.pending_approval
            if approval is not None:
                self.interrupts.append(
                    {
                        "id": interrupt_id(approval),
                        "reason": "tool_approval",
                        "message": f"Allow the call to {approval.tool_name!r}?",
                        "toolCallId": approval.call_id,
                        "expiresAt": _iso(approval.expires_at),
                        "responseSchema": {
                            "type": "object",
                            "properties": {
                                "approved": {"type": "boolean"},
                                "reason": {"type": "string"},
                            },
                            "required": ["approved"],
                        },
                        "metadata": {
                            "toolName": approval.tool_name,
                            "arguments": approval.arguments,
                        },
                    }
                )
                return []
        return [self.tool_result(result)]

    def _finished(self, event: Any) -> bytes:
        self.finished = True
        outcome: dict[str, Any]
        if self.interrupts:
            outcome = {"type": "interrupt", "interrupts": self.interrupts}
        else:
            outcome = {"type": "success"}
            if self.pending:
                outcome["pendingToolCallIds"] = list(self.pending)
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": outcome,
            "usage": _usage(event.usage),
        }
        if event.content and not self.interrupts:
            finished["result"] = event.content
        return _frame(finished)


async def agui_stream(
    run: Any,
    *,
    thread_id: str,
    run_id: str,
    client_tools: Iterable[str] = (),
    started: bool = False,
) -> AsyncIterator[bytes]:
    """The AG-UI events of an active run, as SSE bytes: ``RUN_STARTED`` (unless
    ``started``: the caller sent it) through ``RUN_FINISHED`` or ``RUN_ERROR``.

    ``client_tools``: the names of the tools the client runs (see :func:`frontend_tools`).
    """
    encoder = AguiEncoder(thread_id, run_id, client_tools)
    if not started:
        yield encoder.run_started()
    async for event in run.events(*STREAMED):
        for chunk in encoder.encode(event):
            yield chunk
    if not encoder.finished:  # the run ended without a final event this stream saw
        yield encoder.run_error("the run ended without a result", "RunEnded")
