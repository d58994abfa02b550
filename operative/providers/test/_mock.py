"""MockProvider: a generate function whose answers come from a handler."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TypeAlias

import trio

from ..._core._errors import InvalidArgument, InvalidResponseError, ProviderError
from ..._core._model import GenerateRequest, GenerateResponse
from .._errors import status_error

__all__ = ["MockHandler", "MockProvider", "provider_error"]

MockAnswer: TypeAlias = GenerateResponse | str | Exception
MockHandler: TypeAlias = Callable[[GenerateRequest], MockAnswer | Awaitable[MockAnswer]]
"""``(request) -> GenerateResponse | str | Exception`` (or an awaitable of one)."""


def provider_error(
    status: int,
    message: str = "",
    *,
    provider: str = "mock",
    model: str = "mock-model",
    retry_after: float | None = None,
    request_id: str | None = None,
) -> ProviderError:
    """The error a real adapter raises for an HTTP ``status`` (429, 500, 529, 401, ...).

    The same class, message shape and ``retryable`` flag as Anthropic's and OpenAI's
    adapters produce, so retry and fallover policies see what they would in production.
    """
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise InvalidArgument(f"provider_error() takes an HTTP error status, got {status!r}")
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return status_error(
        provider=provider,
        model=model,
        status=status,
        message=message or f"mock error {status}",
        headers=headers,
        request_id=request_id,
        key_variable="MOCK_API_KEY",
    )


class MockProvider:
    """A generate function that asks ``handler`` for every answer.

    The handler takes the :class:`~operative.GenerateRequest` and returns a
    ``GenerateResponse``, a ``str`` (a plain text answer) or an exception, which is
    raised; it may be ``async`` (to sleep on trio's clock, or wait on an event).
    ``requests`` records every request, ``cancelled`` those whose call was cancelled
    (and ``cancel_reasons`` why).

    Example::

        generate = MockProvider(lambda request: "hello")
        result = await create_agent(generate=generate).run("hi")
    """

    __test__ = False

    def __init__(self, handler: MockHandler, *, name: str = "mock") -> None:
        if not callable(handler):
            raise InvalidArgument(f"MockProvider takes a handler function, got {handler!r}")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"MockProvider name must be a non-empty string, got {name!r}")
        self.handler = handler
        self.name = name
        self.requests: list[GenerateRequest] = []
        """Every request, in the order the calls began."""
        self.cancelled: list[GenerateRequest] = []
        """The requests whose calls were cancelled before they answered."""
        self.cancel_reasons: list[str | None] = []
        """Why each of those calls was cancelled (the cancel scope's reason, if given)."""

    @property
    def calls(self) -> int:
        """How many times the provider was called."""
        return len(self.requests)

    def __repr__(self) -> str:
        return f"MockProvider(name={self.name!r}, calls={self.calls})"

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        self.requests.append(request)
        try:
            answer = self.handler(request)
            if inspect.isawaitable(answer):
                answer = await answer
            else:
                await trio.lowlevel.checkpoint()
        except trio.Cancelled as cancelled:
            self.cancelled.append(request)
            reason = getattr(cancelled, "reason", None)
            self.cancel_reasons.append(reason if isinstance(reason, str) else None)
            raise
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, str):
            return GenerateResponse(content=answer, model=self.name)
        if not isinstance(answer, GenerateResponse):
            raise InvalidResponseError(
                f"MockProvider {self.name!r}: the handler returned {type(answer).__name__}; "
                "return a GenerateResponse, a str or an exception"
            )
        return answer
