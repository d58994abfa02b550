"""Reading a streamed Responses answer into the same response as a non-streamed one.

The events' data is JSON with a ``type``; the final ``response.completed`` (or
``response.incomplete``) event carries the whole response. Its ``output`` is used when
present; otherwise the output items are rebuilt from ``response.output_item.done`` (or,
for items never finished, from ``added`` plus their deltas). Either way the body goes
through :func:`~._responses.response_from_body`, like a non-streamed one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..._core._model import GenerateResponse
from .._common import Delta, DeltaCallback
from ._responses import response_from_body

__all__ = ["ResponsesAssembler"]

_FINAL = ("response.completed", "response.incomplete")
_THINKING = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


class _Item:
    __slots__ = ("data", "done", "parts")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = dict(data)
        self.done = False
        self.parts: list[str] = []

    def finished(self) -> dict[str, Any]:
        """The item, with streamed text or arguments filled in if it never finished."""
        if self.done or not self.parts:
            return self.data
        joined = "".join(self.parts)
        if self.data.get("type") == "function_call":
            return {**self.data, "arguments": joined}
        if self.data.get("type") == "message":
            part = {"type": "output_text", "text": joined, "annotations": []}
            return {**self.data, "content": [part]}
        return self.data


class ResponsesAssembler:
    """Feeds on each event's data; :meth:`response` once the final event has arrived."""

    __slots__ = ("_items", "_on_delta", "_response", "error", "finished")

    def __init__(self, on_delta: DeltaCallback | None) -> None:
        self._on_delta = on_delta
        self._items: dict[int, _Item] = {}
        self._response: dict[str, Any] = {}
        self.finished = False
        """``response.completed`` or ``response.incomplete`` arrived."""
        self.error: Mapping[str, Any] | None = None
        """An error the server sent inside the stream (``error``, ``response.failed``)."""

    def feed_data(self, data: str) -> None:
        """Take one event's data (a JSON object with a ``type``)."""
        if self.finished or self.error is not None or data.startswith("[DONE]"):
            return
        event = json.loads(data)
        if isinstance(event, dict):
            self.feed(event)

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event; deltas go to ``on_delta`` as they arrive."""
        kind = event.get("type")
        response = event.get("response")
        if isinstance(response, Mapping):
            self._response = dict(response)
        on_delta = self._on_delta
        index = event.get("output_index", 0)
        if kind == "response.output_text.delta":
            text = event.get("delta") or ""
            self._item(index).parts.append(text)
            if on_delta is not None and text:
                on_delta(Delta(kind="text", text=text, index=index))
        elif kind == "response.function_call_arguments.delta":
            text = event.get("delta") or ""
            item = self._item(index)
            item.parts.append(text)
            if on_delta is not None and text:
                on_delta(
                    Delta(
                        kind="tool_arguments",
                        text=text,
                        index=index,
                        call_id=item.data.get("call_id"),
                        tool_name=item.data.get("name"),
                    )
                )
        elif kind in _THINKING:
            text = event.get("delta") or ""
            if on_delta is not None and text:
                on_delta(Delta(kind="thinking", text=text, index=index))
        elif kind == "response.output_item.added":
            self._items[index] = _Item(event.get("item") or {})
        elif kind == "response.output_item.done":
            item = self._item(index)
            item.data = dict(event.get("item") or {})
            item.done = True
        elif kind in _FINAL:
            self.finished = True
        elif kind == "response.failed":
            error = self._response.get("error")
            self.error = error if isinstance(error, Mapping) else {"message": "response failed"}
        elif kind == "error":
            nested = event.get("error")
            self.error = nested if isinstance(nested, Mapping) else event

    def _item(self, index: int) -> _Item:
        item = self._items.get(index)
        if item is None:
            item = self._items[index] = _Item({})
        return item

    def response(self) -> GenerateResponse:
        """The assembled answer."""
        body = dict(self._response)
        if not body.get("output"):
            body["output"] = [item.finished() for _, item in sorted(self._items.items())]
        return response_from_body(body)
