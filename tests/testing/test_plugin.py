"""The pytest plugin: fixtures, automatic event capture, loading without hypothesis."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from operative import Conversation, create_agent, open_run, stop_when
from operative.testing import RunRecorder, ScriptedModel, ToolCallingModel


def user(text: str) -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


async def test_scripted_model_fixture_builds_models(
    scripted_model: Callable[..., ScriptedModel], autojump_clock: trio.testing.MockClock
) -> None:
    """The factory takes a script and a delay."""
    model = scripted_model(["hello"], delay=3)
    async with open_run(
        generate=model, conversation=user("hi"), stop_when=stop_when.no_tool_calls()
    ) as run:
        pass
    result = await run.result()
    assert result.content == "hello"
    assert trio.current_time() == pytest.approx(3)


async def test_run_recorder_attach(run_recorder: RunRecorder) -> None:
    """attach() records one run's events; check() runs the invariant checker on them."""
    async with open_run(
        generate=ToolCallingModel(), conversation=user("hi"), stop_when=stop_when.no_tool_calls()
    ) as run:
        assert run_recorder.attach(run) is run
        run_recorder.attach(run)  # twice is harmless
    result = await run.result()
    run_recorder.check(result, maximum_steps=25)
    assert run_recorder.types()[0] == "run.started"
    assert run_recorder.types(run) == run_recorder.types(result.run_id)
    assert run_recorder.events == run_recorder.events_of(result)
    with pytest.raises(KeyError, match="no run"):
        run_recorder.events_of("nope")


async def test_run_recorder_captures_every_run(run_recorder: RunRecorder) -> None:
    """capture_all() records runs nobody attached, agents' runs included, until stopped."""
    agent = create_agent(generate=ScriptedModel(["a", "b", "c"]), name="helper")
    capture = run_recorder.capture_all()
    first = await agent.run("one")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.run, "two")
    assert len(run_recorder.runs) == 2
    run_recorder.check(first)
    with capture:
        pass  # leaving the block stops the capture
    await agent.run("three")
    assert len(run_recorder.runs) == 2
    with pytest.raises(ValueError, match="2 runs"):
        run_recorder.types()


async def test_capture_all_ends_with_the_test(run_recorder: RunRecorder) -> None:
    """A capture left running is undone at teardown (this test leaves it on)."""
    run_recorder.capture_all()
    run_recorder.capture_all()  # idempotent


async def test_capture_was_undone(run_recorder: RunRecorder) -> None:
    """The previous test's capture does not reach this test's runs."""
    await create_agent(generate=ScriptedModel(["a"])).run("one")
    assert run_recorder.runs == {}


async def test_operative_clock_is_the_tests_clock(operative_clock: trio.testing.MockClock) -> None:
    """Under pytest-trio, asking for operative_clock makes it the clock: sleeps are free."""
    assert trio.lowlevel.current_clock() is operative_clock
    await trio.sleep(3600)
    assert trio.current_time() >= 3600


PLUGIN_TEST = """
import sys
import pytest

def test_fixtures_work_without_hypothesis(scripted_model, run_recorder, operative_clock):
    import operative.testing
    assert scripted_model(["x"]).calls == 0
    assert run_recorder.runs == {}
    assert operative_clock.autojump_threshold == 0
    with pytest.raises(ImportError):
        import operative.testing.strategies
"""


BLOCK_HYPOTHESIS = """
import sys

class NoHypothesis:
    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoHypothesis())
"""


def test_the_plugin_loads_without_hypothesis(tmp_path: Path) -> None:
    """With hypothesis unimportable, the entry-point plugin still loads and its fixtures work."""
    (tmp_path / "test_plugin_use.py").write_text(PLUGIN_TEST)
    code = BLOCK_HYPOTHESIS + (
        "import pytest; sys.exit(pytest.main(['-q', '-p', 'no:hypothesispytest', "
        f"'-p', 'no:cacheprovider', {str(tmp_path)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_operative_testing_is_not_imported_by_operative() -> None:
    """import operative loads neither operative.testing nor hypothesis."""
    code = (
        "import sys, operative; "
        "print('operative.testing' in sys.modules, 'hypothesis' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "False"]
