"""A sequential model of a conditional text-value store, and the linearizability check.

Operations of one round run concurrently against the store; the round is linearizable
when some order of them, applied one at a time to the model, gives every result the
store gave and leaves the state the store shows afterwards.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs

from ..kvstore import ANY, ConditionalTextValueStore, Delete, Operation, Put
from ..kvstore._protocol import ConflictError

__all__ = ["Get", "Outcome", "Step", "draw_step", "linearize", "model_apply", "perform"]

State = dict[str, tuple[str, int]]
"""key -> (value, version)."""


@attrs.frozen
class Get:
    """Read one key."""

    key: str


Step = Get | tuple[Operation, ...]
"""One operation of a round: a read, or a conditional batch."""

Outcome = tuple[object, ...]
"""What a step gave: ("read", value, version) / ("read", None), ("ok", versions) or
("conflict", key, expected, actual)."""


def model_apply(state: State, step: Step) -> tuple[list[Outcome], State]:
    """Every outcome the model allows for ``step`` (conflicts may name any failing
    operation), and the state after it."""
    if isinstance(step, Get):
        found = state.get(step.key)
        return [("read", None) if found is None else ("read", *found)], state
    conflicts: list[Outcome] = []
    for op in step:
        actual = state[op.key][1] if op.key in state else None
        if op.expected_version is not ANY and op.expected_version != actual:
            conflicts.append(("conflict", op.key, op.expected_version, actual))
    if conflicts:
        return conflicts, state
    after = dict(state)
    versions: list[int | None] = []
    for op in step:
        if isinstance(op, Put):
            version = after[op.key][1] + 1 if op.key in after else 1
            after[op.key] = (op.value, version)
            versions.append(version)
        else:
            assert isinstance(op, Delete)
            after.pop(op.key, None)
            versions.append(None)
    return [("ok", tuple(versions))], after


def linearize(
    state: State, steps: Sequence[Step], outcomes: Sequence[Outcome], final: State
) -> State | None:
    """The model state after ``steps`` if some serial order explains ``outcomes`` and
    ``final``; ``None`` if no order does (the store is not linearizable)."""
    for order in itertools.permutations(range(len(steps))):
        current = state
        for index in order:
            allowed, current = model_apply(current, steps[index])
            if outcomes[index] not in allowed:
                break
        else:
            if current == final:
                return current
    return None


def draw_step(data: Any, st: Any, model: State, keys: list[str], value: str) -> Step:
    """A read, or a batch over one or two keys with plausible expected versions."""
    if data.draw(st.integers(0, 3), label="read?") == 0:
        return Get(data.draw(st.sampled_from(keys), label="key"))
    chosen = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True))
    ops: list[Put | Delete] = []
    for key in chosen:
        current = model[key][1] if key in model else None
        expected = data.draw(
            st.sampled_from([current, current, None, ANY, 1, (current or 0) + 1]), label="expected"
        )
        if data.draw(st.integers(0, 3), label="delete?") == 0:
            ops.append(Delete(key=key, expected_version=expected))
        else:
            ops.append(Put(key=key, value=value, expected_version=expected))
    return tuple(ops)


async def perform(
    store: ConditionalTextValueStore, step: Step, outcomes: list[Outcome], index: int
) -> None:
    """Run ``step`` and put what it gave at ``outcomes[index]``."""
    if isinstance(step, Get):
        found = await store.get(step.key)
        outcomes[index] = ("read", None) if found is None else ("read", found.value, found.version)
        return
    try:
        outcomes[index] = ("ok", tuple(await store.conditional_batch(list(step))))
    except ConflictError as error:
        outcomes[index] = ("conflict", error.key, error.expected, error.actual)
