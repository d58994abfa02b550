"""The benchmark's Trio adapters: a run factory hands back the system's own run
coroutine, and ``answer`` reads its result, refusing a run that did not end as scripted
(a failed run must not pass for a fast one)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from operative import GenerateRequest, GenerateResponse, RunFailed, create_agent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

NAMES = ("floor", "floor_same_work", "operative_side")
floor, floor_same_work, operative_side = (importlib.import_module(f"peers.{n}") for n in NAMES)

ADAPTERS = [floor, floor_same_work, operative_side]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__.rsplit(".", 1)[-1])
async def test_a_run_factory_returns_the_runs_own_coroutine(adapter: ModuleType) -> None:
    before = adapter.CALLS[0]
    pending = adapter.make_steps(3, 0.0)()
    assert pending.__class__.__name__ == "coroutine"
    # Not a wrapper of the adapter's: the coroutine is the system's own loop.
    assert pending.cr_code.co_filename.endswith(("floor.py", "floor_same_work.py", "_agent.py"))
    assert adapter.answer(await pending) == "the answer is 42"
    assert adapter.CALLS[0] == before + 2
    assert adapter.answer(await adapter.make_parallel(3, 0.001)()) == "done"


async def test_operative_answer_refuses_a_run_that_failed() -> None:
    async def generate(request: GenerateRequest) -> GenerateResponse:
        raise ValueError("the model is down")

    with pytest.raises(RunFailed) as failed:
        await create_agent(generate=generate).run("What is 1 + 1?")
    result = failed.value.result
    assert result.finish_reason == "error"
    with pytest.raises(RuntimeError, match="run ended with error"):
        operative_side.answer(result)


def test_same_work_answer_refuses_a_run_that_was_cut_short() -> None:
    result = floor_same_work.RunResult(
        messages=[], steps=(), content="", usage=floor_same_work.Usage(), finish_reason="aborted"
    )
    with pytest.raises(RuntimeError, match="run ended with aborted"):
        floor_same_work.answer(result)
