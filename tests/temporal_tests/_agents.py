"""Agents the Temporal tests run, in this process and in worker processes.

The model answers as a pure function of the conversation, so a step asked again after a
crash gets the same answer: it calls ``work`` once per step, ``steps`` times (from the
user message ``"steps=N"``), then answers with the results. ``work`` appends one line
per execution to the file ``$OPERATIVE_TEST_EFFECTS`` (fsync'd, ``O_APPEND``: it
survives a SIGKILL) and takes ``$OPERATIVE_TEST_WORK_SECONDS`` of real time.
"""

from __future__ import annotations

import os
import re

import trio

from operative import Agent, GenerateRequest, GenerateResponse, ToolCall, create_agent, tool
from operative.testing import ScriptedModel
from operative.tools import ApprovalPolicy, Toolbox


def _steps(request: GenerateRequest) -> int:
    for message in request.conversation.messages:
        if message.role == "user":
            found = re.search(r"steps=(\d+)", message.text)
            if found:
                return int(found.group(1))
    return 1


def _tag(request: GenerateRequest) -> str:
    for message in request.conversation.messages:
        if message.role == "user":
            found = re.search(r"tag=(\S+)", message.text)
            if found:
                return found.group(1)
    return ""


def plan(request: GenerateRequest) -> GenerateResponse | str:
    results = [m for m in request.conversation.messages if m.role == "tool"]
    if len(results) < _steps(request):
        n = len(results)
        arguments: dict[str, object] = {"n": n}
        tag = _tag(request)
        if tag:
            arguments["tag"] = tag
        call = ToolCall(id=f"call-{n}", name="work", arguments=arguments)
        return GenerateResponse(content="", tool_calls=(call,))
    return "results: " + ", ".join(str(m.content) for m in results)


async def _work(n: int, tag: str = "") -> str:
    seconds = float(os.environ.get("OPERATIVE_TEST_WORK_SECONDS", "0"))
    if seconds:
        await trio.sleep(seconds)
    path = os.environ.get("OPERATIVE_TEST_EFFECTS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{tag} {n} {os.getpid()}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return f"done-{n}"


@tool(name="work")
async def work(n: int, tag: str = "") -> str:
    """Do unit of work ``n`` (a side effect, counted in the effects file)."""
    return await _work(n, tag)


@tool(name="work", version="1")
async def versioned_work(n: int) -> str:
    """Do unit of work ``n`` (a side effect, counted in the effects file)."""
    return await _work(n)


@tool
async def wait_forever(n: int) -> str:
    """Never returns (until cancelled)."""
    await trio.sleep(float("inf"))
    return "unreachable"


def worker_agent() -> Agent:
    return create_agent(generate=ScriptedModel(plan), tools=[work], name="worker")


def hanging_agent() -> Agent:
    def script(request: GenerateRequest) -> GenerateResponse | str:
        if any(m.role == "tool" for m in request.conversation.messages):
            return "finished"
        call = ToolCall(id="hang", name="wait_forever", arguments={"n": 0})
        return GenerateResponse(content="", tool_calls=(call,))

    return create_agent(generate=ScriptedModel(script), tools=[wait_forever], name="hanging")


def approving_agent() -> Agent:
    """``work`` needs a person's approval before each call."""
    toolbox = Toolbox([versioned_work], approval_policy=ApprovalPolicy(mode="always"))
    return create_agent(generate=ScriptedModel(plan), toolbox=toolbox, name="approving")


def _plan_items(request: GenerateRequest) -> list[str]:
    for message in request.conversation.messages:
        if message.role == "user":
            found = re.search(r"plan=(\S+)", message.text)
            if found:
                return found.group(1).split(",")
    return []


def scripted(request: GenerateRequest) -> GenerateResponse | str:
    """One call of ``flaky`` per item of ``plan=ok,fail,...``, then an answer."""
    items = _plan_items(request)
    results = [m for m in request.conversation.messages if m.role == "tool"]
    if len(results) < len(items):
        n = len(results)
        arguments = {"n": n, "fail": items[n] == "fail", "tag": _tag(request)}
        return GenerateResponse(
            content="", tool_calls=(ToolCall(id=f"call-{n}", name="flaky", arguments=arguments),)
        )
    return f"{len(results)} calls"


@tool
async def flaky(n: int, fail: bool, tag: str) -> str:
    """Do unit ``n``; raise afterwards when ``fail`` (the effect happened either way)."""
    result = await _work(n, tag)
    if fail:
        raise RuntimeError(f"unit {n} failed")
    return result


def scripted_agent() -> Agent:
    return create_agent(generate=ScriptedModel(scripted), tools=[flaky], name="scripted")


AGENTS = {
    "scripted": scripted_agent,
    "worker": worker_agent,
    "hanging": hanging_agent,
    "approving": approving_agent,
}
