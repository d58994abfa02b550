"""OpenTelemetry tracing and metrics for runs, following the GenAI semantic conventions.

Needs ``opentelemetry-api`` (``pip install 'operative[otel]'``); ``import operative``
never imports it. Trace some runs::

    from operative.instrumentation import Instrumentation

    traced = Instrumentation(tracer_provider=provider)
    async with open_run(..., instrumentation=traced) as run: ...

or every run of the process, until ``uninstrument()``::

    handle = instrument(tracer_provider=provider)

A run is an ``invoke_agent {agent}`` span; each step a ``step {k}`` span inside it;
each model call a ``chat {model}`` CLIENT span and each tool call an
``execute_tool {tool}`` INTERNAL span inside its step. Metrics:
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``.
"""

try:
    import opentelemetry.trace as _trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "operative.instrumentation needs opentelemetry-api: pip install 'operative[otel]'"
    ) from exc

from .._core._instrument_hook import conversation_id as conversation_id
from ._install import InstrumentHandle as InstrumentHandle
from ._install import instrument as instrument
from ._instrumentation import Instrumentation as Instrumentation
from ._semconv import CONVENTIONS_VERSION as CONVENTIONS_VERSION

__all__ = [
    "CONVENTIONS_VERSION",
    "InstrumentHandle",
    "Instrumentation",
    "conversation_id",
    "instrument",
]
