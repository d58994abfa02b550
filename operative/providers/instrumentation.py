"""Tracing for a bare ``GenerateFunction``: the ``chat {model}`` span without a run.

::

    from operative.providers.instrumentation import instrument_generate

    generate = instrument_generate(anthropic_generate(model="claude-sonnet-4-5"))
    response = await generate(request)   # one chat span, token and duration metrics

Inside an instrumented run the run already traces each model call, so the wrapper
then only lends the run its ``provider`` and ``model`` names and opens no second span.
Needs ``opentelemetry-api`` (``pip install 'operative[otel]'``).
"""

from __future__ import annotations

from typing import Any

from .._core._errors import InvalidArgument
from .._core._instrument_hook import current_conversation_id
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from ..instrumentation import Instrumentation
from ..instrumentation._instrumentation import in_traced_call, wall_anchor
from ..instrumentation._semconv import provider_of, request_model_of
from ._fallover import provider_name

__all__ = ["InstrumentedGenerate", "instrument_generate"]


class InstrumentedGenerate:
    """A generate function whose calls are ``chat {model}`` CLIENT spans.

    ``provider`` and ``model`` name the call in its span (``gen_ai.provider.name``,
    ``gen_ai.request.model``); by default they are the wrapped function's own
    ``provider`` and ``model`` attributes (every adapter in ``operative.providers``
    has them). A request whose ``settings`` name a ``model`` uses that one.
    """

    __slots__ = ("_generate", "instrumentation", "model", "name", "provider")

    def __init__(
        self,
        generate: GenerateFunction,
        *,
        instrumentation: Instrumentation | None = None,
        provider: str | None = None,
        model: str | None = None,
    ) -> None:
        if not callable(generate):
            raise InvalidArgument(
                "instrument_generate takes an async function GenerateRequest -> "
                f"GenerateResponse, got {generate!r}"
            )
        if instrumentation is not None and not isinstance(instrumentation, Instrumentation):
            raise InvalidArgument(
                "instrumentation= takes an operative.instrumentation.Instrumentation, got "
                f"{type(instrumentation).__name__}"
            )
        for what, value in (("provider", provider), ("model", model)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidArgument(f"{what}= takes a non-empty str, got {value!r}")
        self._generate = generate
        self.instrumentation = instrumentation or Instrumentation()
        """Where this wrapper's spans and metrics go."""
        self.provider: str = provider or provider_of(generate)
        """``gen_ai.provider.name`` of the calls."""
        self.model: str | None = model or request_model_of(generate, {})
        """``gen_ai.request.model`` of the calls, when known."""
        self.name: str = provider_name(generate)
        """The wrapped function's readable name (what a fallover calls it)."""

    def __repr__(self) -> str:
        return f"instrument_generate({self._generate!r})"

    @property
    def wrapped(self) -> GenerateFunction:
        """The generate function this one traces."""
        return self._generate

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        if in_traced_call():
            return await self._generate(request)
        model = request.settings.get("model") if request.settings else None
        return await self.instrumentation.traced_chat(
            self._generate,
            request,
            provider=self.provider,
            model=model if isinstance(model, str) and model else self.model,
            conversation_id=current_conversation_id(),
            anchor=wall_anchor(),
        )

    async def aclose(self) -> None:
        """Close the wrapped function when it has an ``aclose()`` (an SDK adapter)."""
        close: Any = getattr(self._generate, "aclose", None)
        if close is not None:
            await close()


def instrument_generate(
    generate: GenerateFunction,
    *,
    instrumentation: Instrumentation | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> InstrumentedGenerate:
    """Wrap ``generate`` so every call is a ``chat {model}`` span with GenAI metrics.

    Args:
        generate: any generate function (an adapter, a fallover, your own).
        instrumentation: where spans and metrics go (default: a new
            :class:`~operative.instrumentation.Instrumentation` on OpenTelemetry's
            global providers, content capture off).
        provider: ``gen_ai.provider.name`` (default: ``generate.provider``, or
            ``"unknown"``).
        model: ``gen_ai.request.model`` (default: ``generate.model``).

    Raises:
        InvalidArgument: an argument has the wrong type.
    """
    return InstrumentedGenerate(
        generate, instrumentation=instrumentation, provider=provider, model=model
    )
