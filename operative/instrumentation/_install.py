"""``instrument()``: one instrumentation for every run of the process, until undone."""

from __future__ import annotations

from types import TracebackType

from opentelemetry import metrics, trace

from .._core._instrument_hook import install, uninstall
from ._instrumentation import Instrumentation

__all__ = ["InstrumentHandle", "instrument"]


class InstrumentHandle:
    """What :func:`instrument` installed; ``uninstrument()`` (or leaving a ``with``
    block around it) removes it. Runs already open keep the tracing they started with.
    """

    __slots__ = ("_active", "instrumentation")

    def __init__(self, instrumentation: Instrumentation) -> None:
        self.instrumentation = instrumentation
        """The installed :class:`Instrumentation`."""
        self._active = True

    def __repr__(self) -> str:
        state = "installed" if self._active else "removed"
        return f"<InstrumentHandle {state} {self.instrumentation!r}>"

    @property
    def installed(self) -> bool:
        """True until :meth:`uninstrument` is called."""
        return self._active

    def uninstrument(self) -> None:
        """Stop tracing runs opened from now on; calling it again does nothing."""
        if self._active:
            self._active = False
            uninstall(self.instrumentation)

    def __enter__(self) -> InstrumentHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.uninstrument()


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    capture_content: bool = False,
) -> InstrumentHandle:
    """Trace every run opened from now on that names no ``instrumentation=`` of its own.

    This is the process-wide switch OpenTelemetry instrumentations usually offer; it
    changes one thing (the default instrumentation of new runs) and
    ``uninstrument()`` undoes it. Prefer ``open_run(..., instrumentation=...)`` or
    ``create_agent(..., instrumentation=...)`` where only some runs should be traced.

    Args:
        tracer_provider: where spans go (default: OpenTelemetry's global provider).
        meter_provider: where metrics go (default: the global one).
        capture_content: also record messages, tool arguments and results.

    Raises:
        InvalidArgument: an instrumentation is already installed (uninstrument it
            first), or an argument has the wrong type.
    """
    instrumentation = Instrumentation(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
    )
    install(instrumentation)
    return InstrumentHandle(instrumentation)
