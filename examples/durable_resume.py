"""A durable run outlives the process running it: one process starts it and is killed
mid-run, another finishes it from the journal.

Run it with ``python examples/durable_resume.py``. It needs no API key and no network:
the model is a deterministic offline stand-in (its answer is a function of the
conversation it is shown), and the database is a SQLite file in a temporary directory.

1. A worker process opens a durable run of an order agent and prints the run id once
   ``await run.wait_durably_started()`` returns: from then on the run survives a crash.
2. Step 1 looks the order up. In step 2 the model asks for two calls at once:
   ``reserve_stock`` (declared ``idempotent=True``) and ``charge_card`` (not).
3. While both calls are in flight, this process kills the worker with SIGKILL. Nothing
   runs clean-up; the journal holds ``tool.started`` for both calls and no result.
4. This process waits for the dead worker's lease to expire and calls ``recover(...)``.
   Step 1 is not run again. ``reserve_stock`` is run again, since repeating it is safe.
   ``charge_card`` is not: the model gets an error result saying its outcome is unknown,
   and answers accordingly instead of charging the card a second time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import trio

from operative import Agent, GenerateRequest, GenerateResponse, ToolCall, create_agent, tool
from operative.durable import (
    Durable,
    Generated,
    JournalEntry,
    SqliteDurable,
    StepDone,
    ToolSettled,
    ToolStarted,
    recover,
)

RUN_ID = "order-A-17"
LEASE_SECONDS = 1.0
"""Short, so that the dead worker's run can be claimed a second after the crash."""
TOOL_SECONDS = 1.0
"""How long the step-2 calls take: the worker is killed while they are running."""


@tool(idempotent=True)
async def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up."""
    await trio.lowlevel.checkpoint()
    return {"order_id": order_id, "sku": "MUG-1", "quantity": 2, "amount_cents": 2400}


@tool(idempotent=True)
async def reserve_stock(sku: str, quantity: int) -> str:
    """Reserve stock for an order (keyed by order, so doing it twice is harmless)."""
    print(f"reserve_stock({sku!r}, {quantity}) running", flush=True)
    await trio.sleep(TOOL_SECONDS)
    return f"reserved {quantity} x {sku}"


@tool(mutates=True)
async def charge_card(order_id: str, amount_cents: int) -> str:
    """Charge the customer's card (doing it twice charges twice)."""
    print(f"charge_card({order_id!r}, {amount_cents}) running", flush=True)
    await trio.sleep(TOOL_SECONDS)
    return f"charged {amount_cents} cents for {order_id}"


async def model(request: GenerateRequest) -> GenerateResponse:
    """A deterministic stand-in for a model: what it says depends only on what it is shown."""
    await trio.lowlevel.checkpoint()
    results = {m.tool_name: m for m in request.conversation.messages if m.role == "tool"}
    if "lookup_order" not in results:
        call = ToolCall(id="call-1", name="lookup_order", arguments={"order_id": "A-17"})
        return GenerateResponse(content="Let me find the order.", tool_calls=(call,))
    if "charge_card" not in results:
        reserve = {"sku": "MUG-1", "quantity": 2}
        charge = {"order_id": "A-17", "amount_cents": 2400}
        calls = (
            ToolCall(id="call-2", name="reserve_stock", arguments=reserve),
            ToolCall(id="call-3", name="charge_card", arguments=charge),
        )
        return GenerateResponse(content="Reserving stock and charging the card.", tool_calls=calls)
    if results["charge_card"].outcome == "success":
        return GenerateResponse(content="Order A-17 is reserved and paid.")
    return GenerateResponse(
        content="Stock for order A-17 is reserved. I could not confirm the card charge, so I "
        "did not retry it: check the payment gateway before charging again."
    )


def make_agent() -> Agent:
    return create_agent(
        generate=model,
        tools=[lookup_order, reserve_stock, charge_card],
        instructions="You fulfil orders.",
        name="orders",
    )


# -- worker 1: starts the run, and is killed -----------------------------------------------


async def start_run(db: str) -> None:
    async with SqliteDurable(db) as backend:
        durable = Durable(
            backend,
            run_id=RUN_ID,
            worker_id="worker-1",
            lease_seconds=LEASE_SECONDS,
        )
        async with make_agent().open_run("Please fulfil order A-17.", durable=durable) as run:
            await run.wait_durably_started()
            print(f"acknowledged run {run.run_id}", flush=True)  # safe to hand the id out now
            await run.result()
    print("the run finished in worker 1 (the kill came too late)", flush=True)


# -- this process: kills worker 1, then recovers the run -----------------------------------


def start_and_kill_worker(db: str) -> None:
    command = [sys.executable, __file__, "--worker", db]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as worker:
        assert worker.stdout is not None
        in_flight = 0
        for line in worker.stdout:
            print(f"worker 1 | {line.rstrip()}")
            in_flight += line.endswith("running\n")
            if in_flight == 2:  # both step-2 calls started, neither has settled
                worker.send_signal(signal.SIGKILL)
                break
    if worker.returncode != -signal.SIGKILL:
        raise SystemExit(f"worker 1 exited with {worker.returncode} before it could be killed")
    print("killed worker 1 with SIGKILL while 2 calls were in flight")


def show_journal(entries: list[JournalEntry]) -> None:
    for entry in entries:
        record = entry.record
        kind = record.__struct_config__.tag
        if isinstance(record, Generated):
            what = f"step {record.step}  asks for " + ", ".join(
                call.name for call in record.message.tool_calls
            )
        elif isinstance(record, ToolStarted):
            what = f"step {record.step}  {record.call_id} {record.tool_name}"
        elif isinstance(record, ToolSettled):
            what = f"step {record.step}  {record.result.call_id} {record.result.outcome}"
        elif isinstance(record, StepDone):
            what = f"step {record.step}"
        else:
            what = ""
        print(f"  seq {entry.seq}  {kind:<12}  {what}".rstrip())


async def finish_run(db: str) -> None:
    async with SqliteDurable(db) as backend:
        engine, journal = backend.engine, backend.checkpoint_store
        record = await engine.get(RUN_ID)
        assert record is not None
        print(f"run {RUN_ID} is {record.status}, leased to {record.lease_owner}; its journal:")
        entries = await journal.read(RUN_ID)
        show_journal(entries)
        # Nobody renews the dead worker's lease; once it expires, any worker may claim it.
        print("worker-2: waiting for the lease to expire, then recover(...)")
        await trio.sleep(max(0.0, record.lease_expires_at - time.time()) + 0.05)
        results = await recover(backend, agents={"orders": make_agent()}, worker_id="worker-2")
        result = results[RUN_ID]
        print(f"recovered: {result.finish_reason} after {len(result.steps)} steps")
        run_again = {
            entry.record.call_id
            for entry in await journal.read(RUN_ID, after=entries[-1].seq)
            if isinstance(entry.record, ToolStarted)
        }
        for settled in result.steps[1].results:
            if settled.call_id in run_again:
                print(f"  {settled.tool_name}: run again -> {settled.outcome}")
            else:
                print(f"  {settled.tool_name}: not run again -> {settled.outcome}: {settled.error}")
        print(f"final answer: {result.content}")
        final = await engine.get(RUN_ID)
        assert final is not None
        print(f"run {RUN_ID} is {final.status}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        trio.run(start_run, sys.argv[2])
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "runs.db")
        start_and_kill_worker(db)
        trio.run(finish_run, db)


if __name__ == "__main__":
    main()
