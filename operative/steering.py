"""Steering and selection: what a host may change about a run while it is alive.

Both gates are consulted at the entry of every step, before the step calls the model:

1. **Steering** (:class:`SteeringGate`): a paused session parks the step (a cancellable
   wait; the run reports ``waiting``), and a new configuration version is applied once,
   as a ``steering.applied`` record. :class:`Steering` is the host-side gate with a
   command surface (:class:`Pause`, :class:`Resume`, :class:`Configure`);
   :class:`SteeringCursor` is the per-run side the loop drives.
2. **Selection** (:class:`SelectionGate`): the plan the run was selected for is
   revalidated; when it no longer reaches ``"selected"`` the step fails with
   :class:`~operative.steering.SelectionRevalidationError` (:func:`check_selection`).
"""

from __future__ import annotations

import inspect
import logging
import os
import types
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

import attrs
import msgspec
import trio

from ._core._errors import InvalidArgument, OperativeError
from ._core._events import SteeringApplied

__all__ = [
    "Configure",
    "Pause",
    "Resume",
    "SelectionGate",
    "SelectionOutcome",
    "SelectionRevalidationError",
    "Steering",
    "SteeringApplied",
    "SteeringCommand",
    "SteeringCursor",
    "SteeringGate",
    "SteeringOutcome",
    "SteeringOutcomeStatus",
    "SteeringState",
    "check_selection",
]


class SelectionRevalidationError(OperativeError):
    """The plan a run was selected for no longer reaches ``"selected"`` on revalidation.

    Raised at a step's entry (after any steering pause), so the step never calls the
    model. ``outcome`` is what ``revalidate`` answered (``None`` when it raised or
    answered something unusable), ``plan`` what ``get_plan`` returned.
    """

    def __init__(
        self, message: str, *, outcome: str | None = None, plan: object = None, step: int = 0
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.plan = plan
        self.step = step


logger = logging.getLogger("operative.steering")

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


def _command_id() -> str:
    return os.urandom(8).hex()


# -- what a run reads ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SteeringState:
    """What the host wants now: paused or not, and the configuration in force."""

    paused: bool = False
    config_version: int = 0
    """Grows with every accepted configuration; 0 means none was ever set."""
    config: Mapping[str, Any] = _EMPTY
    """The configuration of ``config_version`` (read-only)."""


@runtime_checkable
class SteeringGate(Protocol):
    """What a run needs from a steering source (the specification's ``SteeringGate``).

    A gate may also offer ``applied_floor() -> int``, the highest configuration version
    any run on the session already applied (read once, when a run reaches its first
    step, so the run does not announce it again), and ``record_applied(version,
    run_id)``, which a run calls when it applies a version.
    """

    @property
    def session_id(self) -> str: ...

    def desired_state(self) -> SteeringState:
        """The state now; synchronous and cheap (read at every step entry)."""
        ...

    async def wait_for_resume(self) -> None:
        """Return once the session is no longer paused (a cancellable park)."""
        ...


class Pause(msgspec.Struct, frozen=True, kw_only=True, tag="pause", tag_field="kind"):
    """Park every run of the session at its next step entry."""

    reason: str = ""
    command_id: str = msgspec.field(default_factory=_command_id)


class Resume(msgspec.Struct, frozen=True, kw_only=True, tag="resume", tag_field="kind"):
    """Let parked runs go on."""

    command_id: str = msgspec.field(default_factory=_command_id)


class Configure(msgspec.Struct, frozen=True, kw_only=True, tag="configure", tag_field="kind"):
    """Set the session's configuration; ``version`` must exceed the current one."""

    config: dict[str, Any]
    version: int
    command_id: str = msgspec.field(default_factory=_command_id)


SteeringCommand: TypeAlias = Pause | Resume | Configure
"""A command a host submits to :meth:`Steering.submit`."""

SteeringOutcomeStatus: TypeAlias = Literal["accepted", "rejected", "superseded", "failed"]


class SteeringOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What became of a command (``steering.accepted`` / ``rejected`` / ...).

    ``accepted``: the state changed. ``rejected``: it did not, and will not (a stale
    version, pausing a paused session, a configuration the validator refused).
    ``superseded``: an accepted command was replaced by a newer one before any run
    took it up. ``failed``: processing the command raised.
    """

    status: SteeringOutcomeStatus
    command: SteeringCommand
    session_id: str
    time: float
    reason: str = ""
    config_version: int = 0
    """The session's configuration version after this outcome."""

    @property
    def command_id(self) -> str:
        return self.command.command_id

    @property
    def event_type(self) -> str:
        """The event type this outcome is announced as, e.g. ``"steering.rejected"``."""
        return f"steering.{self.status}"


OutcomeListener: TypeAlias = Callable[[SteeringOutcome], object]


class Steering:
    """The host's steering of one session: a :class:`SteeringGate` with commands.

    Pass it as ``steering=`` to every run of the session; submit commands from the host
    with :meth:`submit`. Everything is synchronous except :meth:`wait_for_resume`,
    which parks a run until a :class:`Resume` is accepted.

    ``validate_config``, when given, is called with each :class:`Configure`'s config:
    raising ``ValueError`` (or an ``InvalidArgument``) rejects it with that message;
    any other exception marks the command ``failed``.
    """

    __slots__ = (
        "_applied",
        "_config",
        "_listeners",
        "_paused",
        "_pending_config",
        "_pending_pause",
        "_resumed",
        "_validate",
        "_version",
        "listener_errors",
        "recent",
        "session_id",
    )

    def __init__(
        self,
        session_id: str,
        *,
        config: Mapping[str, Any] | None = None,
        config_version: int = 0,
        validate_config: Callable[[Mapping[str, Any]], object] | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument(f"session_id takes a non-empty str, got {session_id!r}")
        _check_version(config_version, allow_zero=True)
        if config is not None and not isinstance(config, Mapping):
            raise InvalidArgument(f"config= takes a mapping, got {type(config).__name__}")
        if validate_config is not None and not callable(validate_config):
            raise InvalidArgument(f"validate_config= takes a callable, got {validate_config!r}")
        self.session_id = session_id
        self._config: Mapping[str, Any] = _frozen(config) if config else _EMPTY
        self._version = config_version
        self._applied = config_version
        """The highest version any run applied (the applied floor)."""
        self._paused = False
        self._resumed = trio.Event()
        self._pending_pause: Pause | None = None
        self._pending_config: Configure | None = None
        self._validate = validate_config
        self._listeners: list[OutcomeListener] = []
        self.listener_errors = 0
        self.recent: deque[SteeringOutcome] = deque(maxlen=128)
        """The latest outcomes, oldest first (bounded)."""

    def __repr__(self) -> str:
        state = "paused" if self._paused else "running"
        return f"<Steering {self.session_id} {state} v{self._version}>"

    # -- the gate --------------------------------------------------------------------

    def desired_state(self) -> SteeringState:
        return SteeringState(paused=self._paused, config_version=self._version, config=self._config)

    async def wait_for_resume(self) -> None:
        """Park until the session is resumed (returns at once when it is not paused)."""
        if not self._paused:
            await trio.lowlevel.checkpoint()
            return
        # A run parked on the pause: it has taken effect and can no longer be superseded.
        self._pending_pause = None
        await self._resumed.wait()

    def applied_floor(self) -> int:
        return self._applied

    def record_applied(self, version: int, run_id: str = "") -> None:
        """A run applied ``version``: raise the floor; the command is no longer pending."""
        if version > self._applied:
            self._applied = version
        pending = self._pending_config
        if pending is not None and pending.version <= version:
            self._pending_config = None

    # -- commands --------------------------------------------------------------------

    def add_listener(self, listener: OutcomeListener) -> Callable[[], None]:
        """Call ``listener(outcome)`` for every outcome; returns the remover.

        A run with ``steering=`` adds one for its lifetime and emits each outcome as a
        ``steering.<status>`` event. Listeners are plain callables; one that raises is
        logged and counted.
        """
        checked: object = listener
        if not callable(checked):
            raise InvalidArgument(f"listener must be callable, got {listener!r}")
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def submit(self, command: SteeringCommand) -> SteeringOutcome:
        """Apply a command now and return its outcome (``accepted``, ``rejected`` or
        ``failed``); a command it replaces is reported ``superseded`` first."""
        if isinstance(command, Pause):
            return self._pause(command)
        if isinstance(command, Resume):
            return self._resume(command)
        if isinstance(command, Configure):
            return self._configure(command)
        raise InvalidArgument(
            f"submit() takes Pause(), Resume() or Configure(config, version), "
            f"got {type(command).__name__}"
        )

    def pause(self, reason: str = "") -> SteeringOutcome:
        """Shorthand for ``submit(Pause(reason=reason))``."""
        return self.submit(Pause(reason=reason))

    def resume(self) -> SteeringOutcome:
        """Shorthand for ``submit(Resume())``."""
        return self.submit(Resume())

    def configure(self, config: Mapping[str, Any], version: int) -> SteeringOutcome:
        """Shorthand for ``submit(Configure(config=config, version=version))``."""
        return self.submit(Configure(config=dict(config), version=version))

    def _pause(self, command: Pause) -> SteeringOutcome:
        if self._paused:
            return self._record("rejected", command, "the session is already paused")
        self._paused = True
        self._resumed = trio.Event()
        self._pending_pause = command
        return self._record("accepted", command)

    def _resume(self, command: Resume) -> SteeringOutcome:
        if not self._paused:
            return self._record("rejected", command, "the session is not paused")
        self._paused = False
        pending, self._pending_pause = self._pending_pause, None
        if pending is not None:
            self._record("superseded", pending, "resumed before any run parked on the pause")
        self._resumed.set()
        return self._record("accepted", command)

    def _configure(self, command: Configure) -> SteeringOutcome:
        version = command.version
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidArgument(
                f"Configure(version=...) takes an int of at least 1, got {version!r}"
            )
        config = command.config
        if not isinstance(config, Mapping):
            raise InvalidArgument(
                f"Configure(config=...) takes a mapping, got {type(config).__name__}"
            )
        if version <= self._version:
            return self._record(
                "rejected",
                command,
                f"stale version {version}: the session is at version {self._version}; "
                "submit a higher version",
            )
        if self._validate is not None:
            try:
                self._validate(types.MappingProxyType(dict(config)))
            except (ValueError, InvalidArgument) as exc:
                return self._record("rejected", command, str(exc) or type(exc).__name__)
            except Exception as exc:
                return self._record("failed", command, f"{type(exc).__name__}: {exc}")
        self._version = version
        self._config = _frozen(config)
        pending, self._pending_config = self._pending_config, command
        if pending is not None:
            self._record(
                "superseded",
                pending,
                f"version {version} replaced version {pending.version} before any run applied it",
            )
        return self._record("accepted", command)

    def _record(
        self, status: SteeringOutcomeStatus, command: SteeringCommand, reason: str = ""
    ) -> SteeringOutcome:
        outcome = SteeringOutcome(
            status=status,
            command=command,
            session_id=self.session_id,
            time=trio.current_time(),
            reason=reason,
            config_version=self._version,
        )
        self.recent.append(outcome)
        for listener in tuple(self._listeners):
            try:
                listener(outcome)
            except Exception:
                self.listener_errors += 1
                logger.exception("steering listener %r raised", listener)
        return outcome


def _check_version(version: object, *, allow_zero: bool = False) -> None:
    floor = 0 if allow_zero else 1
    if isinstance(version, bool) or not isinstance(version, int) or version < floor:
        raise InvalidArgument(f"a config version is an int of at least {floor}, got {version!r}")


def _frozen(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(config))


# -- the per-run side ----------------------------------------------------------------


class SteeringCursor:
    """One run's view of a steering gate; the loop calls :meth:`at_step_entry`.

    ``on_park(state)`` is called before the run parks on a pause and ``on_unpark()``
    after (also when the park is cancelled): the loop declares and clears its
    ``steering`` wait there, so a paused run reports ``waiting`` and is never stalled.
    A cursor without a gate does nothing.
    """

    __slots__ = ("_floor", "_gate", "_last_applied", "_on_park", "_on_unpark", "run_id", "waited")

    def __init__(
        self,
        gate: SteeringGate | None,
        run_id: str | None,
        *,
        on_park: Callable[[SteeringState], object] | None = None,
        on_unpark: Callable[[], object] | None = None,
    ) -> None:
        if gate is not None:
            if not run_id or not isinstance(run_id, str):
                raise InvalidArgument(
                    "steering= needs a run_id=: the run's steering.applied events name it, "
                    "and runs on one session de-duplicate by it"
                )
            missing = [
                name
                for name in ("session_id", "desired_state", "wait_for_resume")
                if not hasattr(gate, name)
            ]
            if missing:
                raise InvalidArgument(
                    f"steering= takes a SteeringGate; {type(gate).__name__} lacks "
                    f"{', '.join(missing)}"
                )
        self._gate = gate
        self.run_id = run_id or ""
        self._on_park = on_park
        self._on_unpark = on_unpark
        self._floor: int | None = None
        """The session's applied floor, read once at the run's first step entry."""
        self._last_applied = 0
        self.waited = 0.0
        """Seconds this run spent parked on pauses."""

    @property
    def enabled(self) -> bool:
        return self._gate is not None

    @property
    def last_applied(self) -> int:
        """The highest configuration version this run announced (0: none)."""
        return self._last_applied

    async def at_step_entry(self, step: int) -> list[SteeringApplied]:
        """Park while paused, then return the ``steering.applied`` record due, if any.

        Returns one record when the desired configuration version is above both the
        session's applied floor at run start and the last version this run applied;
        otherwise an empty list. Always checkpoints; cancellable while parked.
        """
        gate = self._gate
        if gate is None:
            await trio.lowlevel.checkpoint()
            return []
        if self._floor is None:
            floor_of = getattr(gate, "applied_floor", None)
            self._floor = int(floor_of()) if callable(floor_of) else 0
        state = gate.desired_state()
        parked = False
        while state.paused:
            parked = True
            await self._park(gate, state)
            state = gate.desired_state()
        if not parked:
            await trio.lowlevel.checkpoint()
        previous = max(self._floor, self._last_applied)
        version = state.config_version
        if version <= previous:
            return []
        self._last_applied = version
        record = getattr(gate, "record_applied", None)
        if callable(record):
            record(version, self.run_id)
        return [
            SteeringApplied(
                run_id=self.run_id,
                step=step,
                time=trio.current_time(),
                session_id=gate.session_id,
                config_version=version,
                config=dict(state.config),
                previous_version=previous,
            )
        ]

    async def _park(self, gate: SteeringGate, state: SteeringState) -> None:
        if self._on_park is not None:
            self._on_park(state)
        began = trio.current_time()
        try:
            await gate.wait_for_resume()
        finally:
            self.waited += trio.current_time() - began
            if self._on_unpark is not None:
                self._on_unpark()


# -- selection -----------------------------------------------------------------------

PlanT = TypeVar("PlanT")


class SelectionOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What revalidating a plan found. Only ``outcome == "selected"`` lets a step run."""

    outcome: str
    """``"selected"``, or why not (e.g. ``"rejected"``, ``"expired"``, ``"unavailable"``)."""
    reason: str = ""


@runtime_checkable
class SelectionGate(Protocol[PlanT]):
    """The plan a run was selected for, revalidated at every step entry.

    Both methods are synchronous and pure: they read state, they change nothing.
    """

    def get_plan(self) -> PlanT: ...

    def revalidate(self, plan: PlanT) -> SelectionOutcome: ...


def check_selection(gate: SelectionGate[Any], *, step: int = 0) -> None:
    """Revalidate the gate's plan; raise when it no longer reaches ``"selected"``.

    Raises:
        SelectionRevalidationError: the outcome is not ``"selected"``, ``revalidate``
            raised, or it answered something without an ``outcome``.
        InvalidArgument: a method is ``async`` (both must be synchronous).
    """
    plan = _sync_call(gate.get_plan, "get_plan")
    try:
        outcome = _sync_call(gate.revalidate, "revalidate", plan)
    except InvalidArgument:
        raise
    except Exception as exc:
        raise SelectionRevalidationError(
            f"step {step}: revalidating the selected plan raised {type(exc).__name__}: {exc}",
            plan=plan,
            step=step,
        ) from exc
    kind = getattr(outcome, "outcome", None)
    if kind is None and isinstance(outcome, Mapping):
        kind = outcome.get("outcome")
    if not isinstance(kind, str):
        raise SelectionRevalidationError(
            f"step {step}: revalidate() answered {outcome!r}, which has no outcome; "
            "return SelectionOutcome(outcome='selected') to let the step run",
            plan=plan,
            step=step,
        )
    if kind != "selected":
        why = getattr(outcome, "reason", "") or (
            outcome.get("reason", "") if isinstance(outcome, Mapping) else ""
        )
        raise SelectionRevalidationError(
            f"step {step}: the plan this run was selected for no longer holds "
            f"(revalidation outcome {kind!r}{': ' + why if why else ''}); the step did not "
            "run. Select a plan again and start a new run.",
            outcome=kind,
            plan=plan,
            step=step,
        )


def _sync_call(function: Callable[..., Any], name: str, *args: Any) -> Any:
    value = function(*args)
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()  # never awaited: close it so no warning escapes
        raise InvalidArgument(
            f"SelectionGate.{name}() must be synchronous and pure, but it returned an "
            "awaitable; make it a plain function"
        )
    return value
