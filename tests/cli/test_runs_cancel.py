"""``operative runs cancel`` on the data directory's durable runs (for Temporal's, see
test_runs_temporal.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import trio

from operative import GenerateRequest, GenerateResponse
from operative.cli import main
from operative.cli._agents import demo_agent
from operative.cli._state import open_state
from operative.durable import Durable, Lease
from operative.testing import HANG, ScriptedModel


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdin=io.StringIO(), stdout=out, stderr=err, env={})
    return code, out.getvalue(), err.getvalue()


def interrupted_run(data_dir: Path) -> str:
    """A durable run whose process stopped mid-step: running, its lease released."""

    async def interrupt() -> str:
        shutdown = trio.CancelScope()

        async def stops(request: GenerateRequest) -> GenerateResponse:
            shutdown.cancel()
            return await ScriptedModel([HANG])(request)

        async with open_state(data_dir) as state:
            durable = Durable(state.durable)
            with shutdown:
                async with demo_agent(stops).open_run("what is 2 + 2", durable=durable) as run:
                    await run.wait_durably_started()
                    await trio.sleep_forever()
            record = await state.engine.get(run.run_id)
            assert record is not None
            assert record.status == "running"
            return run.run_id

    return trio.run(interrupt)


def test_cancel_a_held_run_then_one_nobody_holds(tmp_path: Path) -> None:
    run_id = interrupted_run(tmp_path)
    data = ["--data-dir", str(tmp_path)]

    async def claim() -> Lease:
        async with open_state(tmp_path) as state:
            (lease,) = await state.engine.claim(
                worker_id="w-1", lease_seconds=600, run_ids=[run_id]
            )
            return lease

    lease = trio.run(claim)
    code, out, err = run("runs", "cancel", run_id, "--reason", "stop it", *data)
    assert (code, err) == (0, "")
    assert out == (
        f"cancel requested for run {run_id} (stop it): the worker holding it (w-1) aborts "
        "it at its next lease renewal or journal write\n"
    )
    code, out, _ = run("runs", "show", run_id, *data)
    assert "lease     w-1" in out
    assert "cancel    requested: stop it" in out

    async def release() -> None:
        async with open_state(tmp_path) as state:
            await state.engine.release(lease)

    trio.run(release)
    code, out, err = run("runs", "cancel", run_id, "--reason", "stop it", *data, "--json")
    assert (code, err) == (0, "")
    record = json.loads(out)
    assert record["status"] == "aborted"
    assert record["outcome"]["abort_reason"] == "stop it"
    code, out, _ = run("runs", "show", run_id, *data)
    assert "status    aborted (aborted)" in out
    assert "aborted   stop it" in out
    code, out, err = run("runs", "cancel", run_id, *data)
    assert (code, err) == (0, "")
    assert out == f"run {run_id} had ended already: aborted (aborted); nothing to cancel\n"


def test_cancel_of_a_run_nobody_stored_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    code, out, err = run("runs", "cancel", "run_nope", "--data-dir", str(fresh))
    assert (code, out) == (2, "")
    assert "no run 'run_nope'" in err
    assert not fresh.exists()
    interrupted_run(tmp_path)
    code, _, err = run("runs", "cancel", "run_nope", "--data-dir", str(tmp_path))
    assert code == 2
    assert "list them with `operative runs list --data-dir" in err
