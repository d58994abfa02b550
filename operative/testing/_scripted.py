"""``ScriptedModel``: a ``GenerateFunction`` that plays a script, for tests and demos."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, TypeAlias

import trio

from .._core._errors import InvalidArgument, OperativeError
from .._core._model import GenerateRequest, GenerateResponse

__all__ = ["HANG", "ScriptExhausted", "ScriptedModel"]


class _Hang:
    """Script item: the call never returns (until cancelled)."""

    def __repr__(self) -> str:
        return "HANG"


HANG: Final = _Hang()
"""Put ``HANG`` in a script where the model should hang (an abort or timeout ends it)."""

ScriptItem: TypeAlias = GenerateResponse | str | BaseException | _Hang
ScriptFunction: TypeAlias = Callable[
    [GenerateRequest],
    "GenerateResponse | str | _Hang | Awaitable[GenerateResponse | str | _Hang]",
]


class ScriptExhausted(OperativeError, AssertionError):
    """The model was called more times than its script has responses."""


class ScriptedModel:
    """Answers from a list, in order, or from a function of the request.

    A list item may be a ``GenerateResponse``, a ``str`` (a plain answer), an exception
    (raised for that call) or :data:`HANG`. A function receives the request and returns
    a ``GenerateResponse`` or a ``str`` (or an awaitable of one), raises, or returns
    ``HANG``. Every request is recorded in ``requests``.

    Args:
        script: the responses, in order, or a function of the request.
        delay: seconds each call "thinks" before answering, on trio's clock (so virtual
            time under ``MockClock``: aborts and timeouts can land mid-call for free).

    Raises:
        ScriptExhausted: (from a call) the model was called more often than the script
            has responses.
    """

    __test__ = False

    def __init__(
        self, script: Iterable[ScriptItem] | ScriptFunction, *, delay: float = 0.0
    ) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise InvalidArgument(f"delay must be seconds >= 0, not {delay!r}")
        self.delay = float(delay)
        self.requests: list[GenerateRequest] = []
        """Every request the model saw, in order."""
        self._function: ScriptFunction | None = None
        self._items: list[ScriptItem] = []
        if callable(script):
            self._function = script
        else:
            self._items = list(script)
            for item in self._items:
                if not isinstance(item, GenerateResponse | str | BaseException | _Hang):
                    raise InvalidArgument(
                        f"script items are GenerateResponse, str, an exception or HANG; "
                        f"got {type(item).__name__}"
                    )

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self.requests)

    def __repr__(self) -> str:
        what = "a function" if self._function is not None else f"{len(self._items)} responses"
        return f"<ScriptedModel {what}, {self.calls} calls>"

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        index = len(self.requests)
        self.requests.append(request)
        if self.delay:
            await trio.sleep(self.delay)
        if self._function is not None:
            answer: Any = self._function(request)
            if inspect.isawaitable(answer):
                answer = await answer
        else:
            if index >= len(self._items):
                raise ScriptExhausted(
                    f"the script has {len(self._items)} responses but the model was called "
                    f"a {index + 1}th time (step {request.step}); add responses or a stop "
                    "condition"
                )
            answer = self._items[index]
        if isinstance(answer, _Hang):
            await trio.sleep_forever()
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, str):
            return GenerateResponse(content=answer)
        if not isinstance(answer, GenerateResponse):
            raise InvalidArgument(
                f"a script function must return GenerateResponse or str, got "
                f"{type(answer).__name__}"
            )
        return answer
