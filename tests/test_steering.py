"""Steering (commands, outcomes, the per-run cursor) and the selection gate."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from operative import InvalidArgument, OperativeError
from operative.liveness import LivenessTracker, StallPolicy, create_stall_watchdog
from operative.steering import (
    Configure,
    Pause,
    Resume,
    SelectionGate,
    SelectionOutcome,
    SelectionRevalidationError,
    Steering,
    SteeringApplied,
    SteeringCursor,
    SteeringGate,
    SteeringOutcome,
    SteeringState,
    check_selection,
)

ROOT = Path(__file__).resolve().parents[1]

# -- the command surface --------------------------------------------------------------


async def test_pause_and_resume_are_accepted_once() -> None:
    """Pausing a paused session, or resuming a running one, is rejected with a reason."""
    steering = Steering("session-1")
    assert isinstance(steering, SteeringGate)
    assert steering.desired_state() == SteeringState()
    assert steering.submit(Pause(reason="lunch")).status == "accepted"
    assert steering.desired_state().paused
    rejected = steering.submit(Pause())
    assert (rejected.status, rejected.reason) == ("rejected", "the session is already paused")
    assert steering.resume().status == "accepted"
    assert not steering.desired_state().paused
    assert steering.resume().reason == "the session is not paused"


async def test_a_pause_nobody_parked_on_is_superseded_by_resume() -> None:
    """Resume before any run parked: the pause is reported superseded."""
    steering = Steering("session-1")
    outcomes: list[SteeringOutcome] = []
    steering.add_listener(outcomes.append)
    pause = Pause()
    steering.submit(pause)
    steering.submit(Resume())
    assert [(o.status, type(o.command).__name__) for o in outcomes] == [
        ("accepted", "Pause"),
        ("superseded", "Pause"),
        ("accepted", "Resume"),
    ]
    assert outcomes[1].command_id == pause.command_id
    assert outcomes[1].event_type == "steering.superseded"


async def test_a_pause_a_run_parked_on_is_not_superseded() -> None:
    """Once a run parked on the pause it took effect: resume only releases it."""
    steering = Steering("session-1")
    outcomes: list[str] = []
    steering.add_listener(lambda outcome: outcomes.append(outcome.status))
    steering.pause()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(steering.wait_for_resume)
        await trio.testing.wait_all_tasks_blocked()
        steering.resume()
    assert outcomes == ["accepted", "accepted"]
    await steering.wait_for_resume()  # not paused: returns at once


async def test_configure_versions_only_go_up() -> None:
    """A stale or equal version is rejected and names the current version."""
    steering = Steering("session-1", config={"tone": "formal"}, config_version=3)
    assert steering.desired_state().config == {"tone": "formal"}
    stale = steering.submit(Configure(config={"tone": "casual"}, version=3))
    assert stale.status == "rejected"
    assert "stale version 3" in stale.reason
    assert "version 3" in stale.reason
    accepted = steering.configure({"tone": "casual"}, 4)
    assert (accepted.status, accepted.config_version) == ("accepted", 4)
    state = steering.desired_state()
    assert (state.config_version, dict(state.config)) == (4, {"tone": "casual"})
    with pytest.raises(TypeError):
        state.config["tone"] = "loud"  # type: ignore[index]


async def test_an_unapplied_configuration_is_superseded_by_a_newer_one() -> None:
    """v1 replaced by v2 before any run applied it is superseded; an applied one is not."""
    steering = Steering("session-1")
    outcomes: list[tuple[str, int]] = []
    steering.add_listener(
        lambda o: outcomes.append((o.status, o.command.version))  # type: ignore[union-attr]
    )
    steering.configure({"a": 1}, 1)
    steering.configure({"a": 2}, 2)
    steering.record_applied(2, "run-1")
    steering.configure({"a": 3}, 3)
    assert outcomes == [
        ("accepted", 1),
        ("superseded", 1),
        ("accepted", 2),
        ("accepted", 3),
    ]
    assert steering.applied_floor() == 2


async def test_the_validator_rejects_or_fails_a_configuration() -> None:
    """ValueError from the validator rejects; any other error marks the command failed."""

    def validate(config: Mapping[str, Any]) -> None:
        if "model" not in config:
            raise ValueError("a configuration names a model")
        if config["model"] == "boom":
            raise RuntimeError("validator crashed")

    steering = Steering("session-1", validate_config=validate)
    rejected = steering.configure({}, 1)
    assert (rejected.status, rejected.reason) == ("rejected", "a configuration names a model")
    failed = steering.configure({"model": "boom"}, 1)
    assert failed.status == "failed"
    assert "RuntimeError: validator crashed" in failed.reason
    assert steering.configure({"model": "m"}, 1).status == "accepted"
    assert [o.status for o in steering.recent] == ["rejected", "failed", "accepted"]


async def test_misused_commands_raise() -> None:
    """Something that is not a command, or a malformed Configure, raises InvalidArgument."""
    steering = Steering("session-1")
    with pytest.raises(InvalidArgument, match="submit"):
        steering.submit("pause")  # type: ignore[arg-type]
    for version in (0, -1, True, "2"):
        with pytest.raises(InvalidArgument, match="version"):
            steering.submit(Configure(config={}, version=version))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="mapping"):
        steering.submit(Configure(config=[1], version=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Steering("")
    with pytest.raises(InvalidArgument):
        Steering("s", config_version=-1)
    with pytest.raises(InvalidArgument):
        steering.add_listener(None)  # type: ignore[arg-type]


async def test_listeners_can_be_removed_and_a_raising_one_is_counted() -> None:
    """The remover stops delivery; a listener that raises never breaks submit()."""
    steering = Steering("session-1")
    seen: list[str] = []
    remove = steering.add_listener(lambda o: seen.append(o.status))

    def broken(outcome: SteeringOutcome) -> None:
        raise RuntimeError("listener bug")

    steering.add_listener(broken)
    steering.pause()
    remove()
    remove()
    steering.resume()
    assert seen == ["accepted"]
    assert steering.listener_errors == 3  # pause, then resume: superseded + accepted


# -- the per-run cursor ---------------------------------------------------------------


def test_a_cursor_with_a_gate_needs_a_run_id() -> None:
    """steering= without run_id= is refused at construction, with the reason."""
    with pytest.raises(InvalidArgument, match="run_id"):
        SteeringCursor(Steering("session-1"), None)
    with pytest.raises(InvalidArgument, match="lacks"):
        SteeringCursor(object(), "run-1")  # type: ignore[arg-type]
    assert not SteeringCursor(None, None).enabled


async def test_a_cursor_without_a_gate_does_nothing() -> None:
    """No gate: no parking, no records."""
    assert await SteeringCursor(None, None).at_step_entry(1) == []


async def test_applied_is_returned_once_per_new_version() -> None:
    """A version is announced at the first step entry that sees it, never again."""
    steering = Steering("session-1")
    cursor = SteeringCursor(steering, "run-1")
    assert await cursor.at_step_entry(1) == []
    steering.configure({"temperature": 0.2}, 1)
    [applied] = await cursor.at_step_entry(2)
    assert isinstance(applied, SteeringApplied)
    assert (applied.run_id, applied.step, applied.session_id) == ("run-1", 2, "session-1")
    assert (applied.config_version, applied.previous_version) == (1, 0)
    assert applied.config == {"temperature": 0.2}
    assert await cursor.at_step_entry(3) == []
    steering.configure({"temperature": 0.9}, 2)
    steering.configure({"temperature": 0.5}, 3)
    [latest] = await cursor.at_step_entry(4)
    assert (latest.config_version, latest.previous_version) == (3, 1)
    assert cursor.last_applied == 3


async def test_runs_on_one_session_dedupe_through_the_applied_floor() -> None:
    """A later run does not announce a version an earlier run on the session applied."""
    steering = Steering("session-1")
    steering.configure({"mode": "fast"}, 1)
    first = SteeringCursor(steering, "run-1")
    second = SteeringCursor(steering, "run-2")  # built now, reads the floor at its step 1
    assert [a.config_version for a in await first.at_step_entry(1)] == [1]
    assert steering.applied_floor() == 1
    assert await second.at_step_entry(1) == []
    steering.configure({"mode": "careful"}, 2)
    assert [a.previous_version for a in await second.at_step_entry(2)] == [1]
    third = SteeringCursor(steering, "run-3")
    assert await third.at_step_entry(1) == []


class MinimalGate:
    """A gate with only the protocol's members (no floor): every run starts at 0."""

    session_id = "session-9"

    def __init__(self) -> None:
        self.state = SteeringState(config_version=2, config={"k": "v"})

    def desired_state(self) -> SteeringState:
        return self.state

    async def wait_for_resume(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_a_gate_without_a_floor_seeds_runs_at_zero() -> None:
    """Without applied_floor() each run announces the version in force once."""
    gate = MinimalGate()
    assert isinstance(gate, SteeringGate)
    for run_id in ("run-1", "run-2"):
        cursor = SteeringCursor(gate, run_id)
        [applied] = await cursor.at_step_entry(1)
        assert (applied.session_id, applied.config_version) == ("session-9", 2)


async def test_a_paused_step_parks_for_an_hour_and_reports_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The step parks until resumed; the run declares a steering wait meanwhile."""
    steering = Steering("session-1")
    tracker = LivenessTracker("run-1")
    tracker.start()
    waits: list[Any] = []

    def on_park(state: SteeringState) -> None:
        waits.append(tracker.declare_wait("steering", detail="paused by the host"))

    cursor = SteeringCursor(
        steering, "run-1", on_park=on_park, on_unpark=lambda: tracker.clear_wait(waits[-1])
    )
    watchdog = create_stall_watchdog(tracker, StallPolicy(stall_after=60, unreachable_after=120))
    steering.pause()
    steering.configure({"plan": "B"}, 1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)

        async def host() -> None:
            await trio.sleep(3600)
            snapshot = tracker.snapshot()
            assert snapshot.status == "waiting"
            assert snapshot.missed_pulse_count == 0
            assert snapshot.declared_wait is not None
            assert snapshot.declared_wait.reason == "steering"
            steering.resume()

        nursery.start_soon(host)
        start = trio.current_time()
        applied = await cursor.at_step_entry(1)
        assert trio.current_time() - start == 3600
        assert [a.config_version for a in applied] == [1]
        assert tracker.status == "running"
        assert cursor.waited == 3600
        tracker.finish("completed")


async def test_a_parked_step_is_cancellable_and_always_unparks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelling a parked step ends the park at once and still calls on_unpark."""
    steering = Steering("session-1")
    events: list[str] = []
    cursor = SteeringCursor(
        steering,
        "run-1",
        on_park=lambda state: events.append("park"),
        on_unpark=lambda: events.append("unpark"),
    )
    steering.pause()
    with trio.move_on_after(5) as scope:
        await cursor.at_step_entry(1)
    assert scope.cancelled_caught
    assert events == ["park", "unpark"]


async def test_a_pause_during_the_park_parks_again() -> None:
    """Resume then pause again before the run looks: the step keeps waiting."""
    steering = Steering("session-1")
    parks: list[int] = []
    cursor = SteeringCursor(steering, "run-1", on_park=lambda s: parks.append(1))
    steering.pause()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cursor.at_step_entry, 1)
        await trio.testing.wait_all_tasks_blocked()
        steering.resume()
        steering.pause()
        await trio.testing.wait_all_tasks_blocked()
        assert len(parks) == 2
        steering.resume()


# -- selection ------------------------------------------------------------------------


class Plan:
    """A selection gate whose plan can be withdrawn."""

    def __init__(self) -> None:
        self.valid = True

    def get_plan(self) -> str:
        return "plan-42"

    def revalidate(self, plan: str) -> SelectionOutcome:
        if self.valid:
            return SelectionOutcome(outcome="selected")
        return SelectionOutcome(outcome="expired", reason="the quota ran out")


def test_a_selected_plan_lets_the_step_run() -> None:
    """check_selection returns quietly while the plan is selected."""
    gate = Plan()
    assert isinstance(gate, SelectionGate)
    check_selection(gate, step=1)


def test_a_plan_that_no_longer_holds_fails_the_step() -> None:
    """Any other outcome raises SelectionRevalidationError naming the outcome and reason."""
    gate = Plan()
    gate.valid = False
    with pytest.raises(SelectionRevalidationError) as caught:
        check_selection(gate, step=3)
    error = caught.value
    assert isinstance(error, OperativeError)
    assert (error.outcome, error.plan, error.step) == ("expired", "plan-42", 3)
    assert "step 3" in str(error)
    assert "'expired': the quota ran out" in str(error)


class Raising:
    def get_plan(self) -> None:
        return None

    def revalidate(self, plan: None) -> SelectionOutcome:
        raise LookupError("plan store down")


class Shapeless:
    def get_plan(self) -> None:
        return None

    def revalidate(self, plan: None) -> Any:
        return "yes"


class MappingOutcome:
    def get_plan(self) -> None:
        return None

    def revalidate(self, plan: None) -> Any:
        return {"outcome": "rejected", "reason": "superseded by plan 43"}


class AsyncGate:
    async def get_plan(self) -> None:
        return None

    def revalidate(self, plan: None) -> SelectionOutcome:
        return SelectionOutcome(outcome="selected")


def test_revalidation_failures_are_selection_errors() -> None:
    """A raising or shapeless revalidate fails the step; a mapping outcome is read."""
    with pytest.raises(SelectionRevalidationError, match="LookupError: plan store down") as c:
        check_selection(Raising())
    assert isinstance(c.value.__cause__, LookupError)
    with pytest.raises(SelectionRevalidationError, match="has no outcome"):
        check_selection(Shapeless())
    with pytest.raises(SelectionRevalidationError, match="superseded by plan 43"):
        check_selection(MappingOutcome())


def test_an_async_gate_is_misuse() -> None:
    """Gates are synchronous: an async method is InvalidArgument (and leaves no warning)."""
    with pytest.raises(InvalidArgument, match="synchronous"):
        check_selection(AsyncGate())


# -- the guide ------------------------------------------------------------------------


async def test_live_control_guide_samples_run_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every Python sample of docs/live-control.md runs, top to bottom, in one namespace."""
    page = ROOT / "docs" / "live-control.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    assert blocks
    namespace: dict[str, Any] = {"__name__": "docs.live_control"}
    for index, block in enumerate(blocks):
        code = compile(
            block,
            f"docs/live-control.md sample {index + 1}",
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        )
        pending = eval(code, namespace)
        if pending is not None:
            await pending
