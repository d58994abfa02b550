"""instrument() installs one process-wide instrumentation; uninstrument() removes it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import operative.instrumentation
from operative import Conversation, InvalidArgument, open_run, stop_when
from operative.instrumentation import instrument
from operative.testing import ScriptedModel

from .conftest import Telemetry


async def _run_once() -> None:
    conversation = Conversation()
    conversation.append_user_message("hi")
    async with open_run(
        generate=ScriptedModel(["hello"]),
        conversation=conversation,
        stop_when=stop_when.no_tool_calls(),
    ):
        pass


async def test_instrument_traces_runs_until_uninstrumented(telemetry: Telemetry) -> None:
    """Runs naming no instrumentation are traced while the handle is installed."""
    handle = instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    try:
        assert handle.installed
        await _run_once()
        assert [span.name for span in telemetry.spans][-1] == "invoke_agent (agent)"
        assert len(telemetry.spans) == 3
    finally:
        handle.uninstrument()
    assert "removed" in repr(handle)
    handle.uninstrument()  # twice is fine
    telemetry.exporter.clear()
    await _run_once()
    assert not telemetry.exporter.get_finished_spans()


async def test_instrument_as_a_context_manager(telemetry: Telemetry) -> None:
    """Leaving the with block uninstruments; a second instrument() meanwhile is refused."""
    with instrument(tracer_provider=telemetry.tracer_provider) as handle:
        assert "installed" in repr(handle)
        with pytest.raises(InvalidArgument, match="already installed"):
            instrument()
        await _run_once()
    assert len(telemetry.spans) == 3
    with instrument() as again:  # free again once the first is gone
        assert again.installed


async def test_a_run_option_overrides_the_process_wide_one(telemetry: Telemetry) -> None:
    """instrumentation= on the run wins over instrument()."""
    other = Telemetry()
    with instrument(tracer_provider=other.tracer_provider):
        conversation = Conversation()
        conversation.append_user_message("hi")
        async with open_run(
            generate=ScriptedModel(["hello"]),
            conversation=conversation,
            stop_when=stop_when.no_tool_calls(),
            instrumentation=telemetry.instrumentation(),
        ):
            pass
    assert len(telemetry.spans) == 3
    assert other.spans == ()


def test_the_public_namespace() -> None:
    """operative.instrumentation re-exports exactly its sorted __all__."""
    names = operative.instrumentation.__all__
    assert names == sorted(names)
    assert all(hasattr(operative.instrumentation, name) for name in names)
    assert operative.instrumentation.CONVENTIONS_VERSION == "1.41.0"


def test_import_operative_does_not_import_opentelemetry() -> None:
    """In a fresh interpreter, operative and its streaming helpers leave OTel unloaded."""
    code = (
        "import sys, operative, operative.streaming, operative.event_log; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


async def test_an_agent_defined_before_instrument_is_traced_while_installed(
    telemetry: Telemetry,
) -> None:
    """``agent.run`` reuses the configuration validated at definition, but which
    instrumentation is installed is read when each run starts."""
    from operative import create_agent

    agent = create_agent(generate=ScriptedModel(["one", "two"]), name="early")
    with instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    ):
        await agent.run("hi")
    assert [span.name for span in telemetry.spans][-1] == "invoke_agent early"
    telemetry.exporter.clear()
    await agent.run("hi again")
    assert not telemetry.exporter.get_finished_spans()
