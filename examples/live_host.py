"""A host that watches and steers live runs: liveness snapshots, pause, resume, approval, abort.

Run it with ``python examples/live_host.py``. It needs no API key: the model is a
SCRIPTED MODEL (``operative.testing.ScriptedModel``) that plays a fixed conversation.
Swap it for a provider's generate function to steer a real one.

1. The host pauses the session (a deploy is in progress) before run 1 starts: the run
   parks at the entry of step 1 and reports ``waiting`` with a ``steering`` declared wait.
2. The host hands the session a new configuration and resumes it: the run announces
   ``steering.applied`` once and calls the model.
3. The model asks to delete a file; the call needs approval, so its task parks inside
   the live run (an ``approval`` declared wait) until a person decides. Here the
   person approves it.
4. Run 2 on the same session hangs in its model call; the host aborts it.

Every change of each run's liveness snapshot is printed as it happens: revision, status,
step and declared wait. Waiting for the person and for the resume never counts as
stalling, although the stall policy would call a much shorter silence a stall.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from operative import (
    ActiveRun,
    Conversation,
    GenerateResponse,
    LivenessSnapshot,
    Toolbox,
    ToolCall,
    open_run,
    stop_when,
    tool,
)
from operative.liveness import StallPolicy
from operative.steering import Steering
from operative.testing import HANG, ScriptedModel
from operative.tools import ApprovalDecision, ApprovalPolicy, PendingApproval

FILES = {"/reports/q3-draft.txt": "draft"}
STEERING_EVENTS = (
    "steering.applied",
    "steering.accepted",
    "steering.rejected",
    "steering.superseded",
    "steering.failed",
)


@tool(version="1", mutates=True)
async def delete_file(path: str) -> str:
    """Delete one file."""
    await trio.lowlevel.checkpoint()
    del FILES[path]
    return f"deleted {path}"


def scripted_model(*script: Any) -> ScriptedModel:
    """A SCRIPTED MODEL: offline, no API key; it plays ``script`` in order."""
    return ScriptedModel(script)


def show(run_id: str) -> Callable[[LivenessSnapshot], None]:
    """An observer that prints each snapshot (it is called in the task that changed it)."""

    def observer(snapshot: LivenessSnapshot) -> None:
        wait = snapshot.declared_wait
        print(
            f"  [{run_id} r{snapshot.revision}] {snapshot.status} step={snapshot.step} "
            f"wait={wait.reason if wait is not None else '-'}"
        )

    return observer


def show_event(event: Any) -> None:
    """Print a steering event: a command's outcome, or a configuration applied."""
    what = getattr(event, "command", None) or f"config version {event.config_version}"
    print(f"  event {event.type}: {what}")


async def wait_until(run: ActiveRun, condition: Callable[[LivenessSnapshot], bool]) -> None:
    """Return once the run's snapshot satisfies ``condition``."""
    async with run.snapshots() as stream:
        async for snapshot in stream:
            if condition(snapshot):
                return


def parked_on(reason: str) -> Callable[[LivenessSnapshot], bool]:
    def condition(snapshot: LivenessSnapshot) -> bool:
        wait = snapshot.declared_wait
        return wait is not None and wait.reason == reason

    return condition


def conversation(text: str) -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


async def main() -> None:
    steering = Steering("session-ops")
    toolbox = Toolbox(
        [delete_file],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=b"an example secret of 32 bytes..!",
    )
    # The person's inbox: the run sends what it wants approved, the person answers.
    send_request, requests = trio.open_memory_channel[PendingApproval](1)
    answers: dict[str, trio.MemorySendChannel[ApprovalDecision]] = {}

    async def ask_a_person(pending: PendingApproval) -> ApprovalDecision:
        send_answer, receive_answer = trio.open_memory_channel[ApprovalDecision](1)
        answers[pending.approval_id] = send_answer
        async with receive_answer:
            await send_request.send(pending)
            return await receive_answer.receive()

    options: dict[str, Any] = {
        "toolbox": toolbox,
        "stop_when": stop_when.no_tool_calls(),
        "steering": steering,
        "stall_policy": StallPolicy(stall_after=0.2, abort_when_stalled=True),
        "on_approval": ask_a_person,
    }

    print("run-1: the session is paused before the run starts")
    steering.pause("deploy in progress")
    delete = ToolCall(id="call-1", name="delete_file", arguments={"path": "/reports/q3-draft.txt"})
    model = scripted_model(
        GenerateResponse(content="I'll delete the Q3 draft.", tool_calls=(delete,)),
        "Done: the Q3 draft is deleted.",
    )
    async with open_run(
        generate=model, conversation=conversation("Delete the Q3 draft."), run_id="run-1", **options
    ) as run:
        run.subscribe_snapshot(show("run-1"))
        for event_type in STEERING_EVENTS:
            run.add_listener(event_type, show_event)

        await wait_until(run, parked_on("steering"))
        await trio.sleep(0.25)  # the deploy takes a while: longer than stall_after
        print(f"host: run-1 is parked, model calls so far: {model.calls}")
        steering.configure({"tone": "terse"}, version=1)
        steering.resume()

        pending = await requests.receive()
        print(f"person: asked to approve {pending.tool_name}({pending.arguments['path']})")
        await trio.sleep(0.25)  # thinking it over: longer than stall_after, not a stall
        await answers[pending.approval_id].send(ApprovalDecision(approved=True, reason="ok"))
    result = await run.result()
    assert result.steps[0].results[0].outcome == "success"
    assert "/reports/q3-draft.txt" not in FILES
    print(f"run-1 finished: {result.finish_reason}: {result.content}")

    print("run-2: the model hangs; the host aborts the run")
    options["stall_policy"] = StallPolicy(stall_after=60)
    async with open_run(
        generate=scripted_model(HANG),
        conversation=conversation("Summarize the week."),
        run_id="run-2",
        **options,
    ) as run:
        run.subscribe_snapshot(show("run-2"))
        await wait_until(run, lambda snapshot: snapshot.step == 1)
        await trio.sleep(0.02)
        run.abort("host shutting down")
    result = await run.result()
    print(f"run-2 finished: {result.finish_reason} ({result.abort_reason})")


if __name__ == "__main__":
    trio.run(main)
