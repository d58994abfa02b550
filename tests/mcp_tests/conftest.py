"""Real MCP servers for the tests, started by the tests and stopped by PID.

- ``mcp-server-time`` (PyPI, a dev dependency) runs as ``python -m mcp_server_time``.
- ``@modelcontextprotocol/server-everything`` (npm) is installed on first use into
  ``~/.cache/operative-tests/npm/`` and reused; it runs with Node over stdio, or over
  HTTP with ``_loopback.mjs`` preloaded, which binds every listening socket to 127.0.0.1
  (the server itself would listen on all interfaces) on a free port and prints it.

Without Node, npm or the registry those tests skip, except under CI (``CI`` or
``OPERATIVE_REQUIRE_MCP`` set), where they fail.

This package is ``tests/mcp_tests``, not ``tests/mcp``: ``tests/`` is on ``sys.path``
while the suite runs (it has no ``__init__.py``), so a test package named ``mcp`` would
be imported instead of the SDK; and without an ``__init__.py`` its ``conftest.py`` would
clash with ``tests/conftest.py`` under mypy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from _cached_install import cache_root, install_once

from operative import Conversation, Event, GenerateResponse, RunResult, ToolCall, open_run
from operative.testing import ScriptedModel

EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
LOOPBACK = Path(__file__).with_name("_loopback.mjs")
_LISTENING = re.compile(rb"operative-test listening 127\.0\.0\.1:(\d+)")


def _required() -> bool:
    names = ("CI", "OPERATIVE_REQUIRE_MCP")
    return any(os.environ.get(name, "") not in ("", "0") for name in names)


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"the MCP servers are required (CI) but {reason}")
    pytest.skip(f"MCP server tests skipped: {reason}")


def npm_install(target: Path, *packages: str, unavailable: Any = None) -> None:
    """``npm install`` ``packages`` into ``target`` (the tests' cache), once per machine.
    A failure is ``unavailable`` (a skip, or a failure under CI)."""
    install_once(
        target,
        lambda staging: [
            "npm",
            "install",
            "--prefix",
            str(staging),
            "--no-audit",
            "--no-fund",
            *packages,
        ],
        what=" ".join(packages),
        unavailable=unavailable or _unavailable,
    )


@pytest.fixture(scope="session")
def everything_script() -> Path:
    """server-everything's entry point (installed with npm into the cache on first use)."""
    name, _, version = EVERYTHING.rpartition("@")
    target = cache_root() / "npm" / f"server-everything-{version}"
    script = target / "node_modules" / name / "dist" / "index.js"
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are not on PATH")
    if script.is_file():
        return script
    npm_install(target, EVERYTHING)
    return script


@pytest.fixture
def time_server() -> tuple[str, list[str]]:
    """The command and arguments that start mcp-server-time over stdio."""
    pytest.importorskip("mcp_server_time")
    return sys.executable, ["-m", "mcp_server_time"]


@pytest.fixture
def everything_stdio(everything_script: Path) -> tuple[str, list[str]]:
    """The command and arguments that start server-everything over stdio."""
    return "node", [str(everything_script), "stdio"]


@attrs.frozen
class HttpServer:
    """A server-everything process serving HTTP on 127.0.0.1."""

    url: str
    pid: int
    output: bytearray


async def _serve_http(
    nursery: trio.Nursery, script: Path, mode: str, path: str
) -> AsyncIterator[HttpServer]:
    process: trio.Process = await nursery.start(
        partial(
            trio.run_process,
            ["node", "--import", str(LOOPBACK), str(script), mode],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "PORT": "0"},
            check=False,
        )
    )
    output = bytearray()
    ports: list[int] = []
    ready = trio.Event()

    async def drain() -> None:
        # Read its log for as long as it runs, so it never blocks on the pipe.
        assert process.stderr is not None
        async for chunk in process.stderr:
            output.extend(chunk)
            if not ports and (found := _LISTENING.search(output)):
                ports.append(int(found.group(1)))
                ready.set()
        ready.set()

    nursery.start_soon(drain)
    with trio.fail_after(30):
        await ready.wait()
    assert ports, f"server-everything did not start: {output.decode(errors='replace')}"
    yield HttpServer(url=f"http://127.0.0.1:{ports[0]}{path}", pid=process.pid, output=output)
    process.terminate()
    with trio.fail_after(10):
        await process.wait()
    assert not pid_alive(process.pid)


@pytest.fixture
async def everything_http(
    nursery: trio.Nursery, everything_script: Path
) -> AsyncIterator[HttpServer]:
    """server-everything over streamable HTTP on 127.0.0.1 (a free port)."""
    async for server in _serve_http(nursery, everything_script, "streamableHttp", "/mcp"):
        yield server


@pytest.fixture
async def everything_sse(
    nursery: trio.Nursery, everything_script: Path
) -> AsyncIterator[HttpServer]:
    """server-everything over the legacy HTTP+SSE transport on 127.0.0.1."""
    async for server in _serve_http(nursery, everything_script, "sse", "/sse"):
        yield server


def child_pids() -> set[int]:
    """The PIDs of this process's children (every thread's), from /proc."""
    children: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        children.update(int(pid) for pid in text.split())
    return children


def pid_alive(pid: int) -> bool:
    """Whether a process exists under ``pid`` (and is not a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


FAULTY = Path(__file__).with_name("_faulty_server.py")


def faulty_server(log: Path | None = None) -> tuple[str, list[str]]:
    """The command that starts ``_faulty_server.py`` (logging what it receives to ``log``)."""
    return sys.executable, [str(FAULTY), *([str(log)] if log is not None else [])]


def script(*steps: list[tuple[str, dict[str, Any]]], answer: str = "done") -> ScriptedModel:
    """A model that makes the given calls, a step at a time (ids ``s<step>c<n>``), then
    answers."""
    responses: list[GenerateResponse | str] = [
        GenerateResponse(
            tool_calls=tuple(
                ToolCall(id=f"s{number}c{index}", name=name, arguments=arguments)
                for index, (name, arguments) in enumerate(calls)
            )
        )
        for number, calls in enumerate(steps, start=1)
    ]
    return ScriptedModel([*responses, answer])


async def run_calls(
    tools: list[Any], *calls: tuple[str, dict[str, Any]], **options: Any
) -> tuple[RunResult, list[Event]]:
    """One run whose model makes ``calls`` in one step; its result and events."""
    conversation = Conversation()
    conversation.append_user_message("go")
    with trio.fail_after(60):
        async with open_run(
            generate=script(list(calls)), conversation=conversation, tools=tools, **options
        ) as run:
            events = [event async for event in run.events()]
    return await run.result(), events
