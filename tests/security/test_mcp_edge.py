"""``operative mcp serve --http``: the Host and Origin check holds on every loopback
spelling, opens only as told, and guards a server bound beyond loopback with a token.

Every test runs the real command in a process of its own, started from another working
directory with ``--app-dir``, and speaks raw HTTP to its socket (or operative's MCP
client). The finding: the SDK turned its rebinding check on only for the host strings
``127.0.0.1``, ``localhost`` and ``::1``, so ``--http 127.1:P`` served any ``Host``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import attrs
import pytest
import trio

from operative.mcp import MCPServer

# A real operative mcp serve process a test: about two seconds each.
pytestmark = pytest.mark.heavy

pytest.importorskip("mcp")
pytest.importorskip("hypercorn")

MODULE = textwrap.dedent(
    '''
    import operative


    @operative.tool(mutates=False)
    async def echo(text: str) -> str:
        """Say it back."""
        return text


    tools = [echo]
    '''
)
MODULE_NAME = "edge_tools"
_SERVING = re.compile(rb"serving MCP at (http://\S+)/mcp")
_TOKEN = re.compile(rb"token: (\S+)")

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "edge-test", "version": "1"},
        },
    }
).encode()


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / f"{MODULE_NAME}.py").write_text(MODULE)
    return directory


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that does not hold the module."""
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    return directory


@attrs.frozen
class Served:
    url: str
    """What the server printed: ``http://ADDRESS:PORT`` (no path)."""
    output: bytearray

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def address(self) -> str:
        host = urlsplit(self.url).hostname
        assert host is not None
        return "127.0.0.1" if host == "0.0.0.0" else host  # every interface: reach it here

    def token(self) -> str | None:
        found = _TOKEN.search(self.output)
        return found.group(1).decode() if found is not None else None


@asynccontextmanager
async def serve(
    app_dir: Path, cwd: Path, bind: str, *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[Served]:
    """``operative mcp serve --http BIND`` in a process of its own; stopped by PID."""
    command = [
        sys.executable,
        "-m",
        "operative",
        "mcp",
        "serve",
        f"{MODULE_NAME}:tools",
        "--app-dir",
        str(app_dir),
        "--http",
        bind,
        *flags,
    ]
    environment = {**os.environ, "NO_COLOR": "1"}
    environment.pop("OPERATIVE_SERVE_TOKEN", None)
    environment.update(env or {})
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=environment
    )
    output, errors = bytearray(), bytearray()
    listening = trio.Event()

    async def drain(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
        assert stream is not None
        while chunk := await stream.receive_some():
            into += chunk
            if _SERVING.search(output):
                listening.set()
        listening.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, process.stdout, output)
        nursery.start_soon(drain, process.stderr, errors)
        try:
            with trio.fail_after(60):
                await listening.wait()
            found = _SERVING.search(output)
            assert found is not None, errors.decode(errors="replace")
            yield Served(url=found.group(1).decode(), output=output)
        finally:
            if process.returncode is None:
                os.kill(process.pid, signal.SIGTERM)
            with trio.fail_after(20):
                code = await process.wait()
    assert code == 0, errors.decode(errors="replace")


async def request(
    served: Served, host: str, *, origin: str | None = None, token: str | None = None
) -> tuple[int, bytes]:
    """POST an ``initialize`` to /mcp over a raw socket with these headers; the status
    and the body (read until the server closes)."""
    headers = [
        "POST /mcp HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(INITIALIZE)}",
        "Connection: close",
    ]
    if origin is not None:
        headers.append(f"Origin: {origin}")
    if token is not None:
        headers.append(f"Authorization: Bearer {token}")
    raw = ("\r\n".join(headers) + "\r\n\r\n").encode() + INITIALIZE
    with trio.fail_after(30):
        stream = await trio.open_tcp_stream(served.address, served.port)
        async with stream:
            await stream.send_all(raw)
            answer = b""
            while chunk := await stream.receive_some():
                answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


SPELLINGS = [
    pytest.param("127.0.0.1", id="127.0.0.1"),
    pytest.param("127.1", id="127.1"),
    pytest.param("127.0.0.2", id="127.0.0.2"),
    pytest.param("localhost", id="localhost"),
    pytest.param(
        "[::1]",
        id="::1",
        marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here"),
    ),
]


@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_every_loopback_spelling_refuses_foreign_hosts_and_origins(
    app_dir: Path, elsewhere: Path, spelling: str
) -> None:
    async with serve(app_dir, elsewhere, f"{spelling}:0") as served:
        own = f"{spelling}:{served.port}"
        status, body = await request(served, "evil.example")
        assert status == 403, body
        assert b"evil.example" in body
        assert b"--allow-host" in body
        status, body = await request(served, f"evil.example:{served.port}")
        assert status == 403, body
        status, body = await request(served, own, origin="http://evil.example")
        assert status == 403, body
        assert b"--allow-origin" in body
        # The same origin, and no origin at all, are served.
        status, body = await request(served, own, origin=f"http://{own}")
        assert status == 200, body
        assert b'"serverInfo"' in body
        # A client naming the server by the same spelling initializes and calls a tool.
        client = MCPServer.http(f"http://{own}/mcp")
        with trio.fail_after(60):
            async with client:
                (echo,) = await client.list_tools()
                assert echo.name == "echo"


async def test_allow_host_and_allow_origin_open_it_up(app_dir: Path, elsewhere: Path) -> None:
    flags = ("--allow-host", "tools.example", "--allow-origin", "https://chat.example")
    async with serve(app_dir, elsewhere, "127.1:0", *flags) as served:
        status, body = await request(served, f"tools.example:{served.port}")
        assert status == 200, body
        status, body = await request(served, "Tools.Example")
        assert status == 200, body
        status, body = await request(served, f"127.1:{served.port}", origin="https://chat.example")
        assert status == 200, body
        # Only those: another name or origin is still refused.
        status, _ = await request(served, "evil.example")
        assert status == 403
        status, _ = await request(served, f"127.1:{served.port}", origin="https://evil.example")
        assert status == 403


async def test_beyond_loopback_any_host_needs_the_printed_token(
    app_dir: Path, elsewhere: Path
) -> None:
    async with serve(app_dir, elsewhere, "0.0.0.0:0") as served:
        token = served.token()
        assert token is not None, served.output.decode()
        assert len(token) >= 32
        target = f"127.0.0.1:{served.port}"
        status, body = await request(served, target)
        assert status == 401, body
        status, _ = await request(served, target, token="not-the-token-at-all")
        assert status == 401
        status, body = await request(served, "tools.example", token=token)
        assert status == 200, body
        # A cross-origin browser request is still refused, token or not.
        status, _ = await request(served, target, token=token, origin="http://evil.example")
        assert status == 403
        client = MCPServer.http(
            f"http://{target}/mcp", headers={"Authorization": f"Bearer {token}"}
        )
        with trio.fail_after(60):
            async with client:
                assert [tool.name for tool in await client.list_tools()] == ["echo"]


async def test_beyond_loopback_allow_host_still_needs_the_token(
    app_dir: Path, elsewhere: Path
) -> None:
    async with serve(app_dir, elsewhere, "0.0.0.0:0", "--allow-host", "tools.example") as served:
        token = served.token()
        assert token is not None, served.output.decode()
        status, _ = await request(served, "tools.example", token=token)
        assert status == 200
        status, _ = await request(served, "tools.example")
        assert status == 401
        status, _ = await request(served, "evil.example", token=token)
        assert status == 403


async def test_the_token_comes_from_the_environment_and_is_not_printed(
    app_dir: Path, elsewhere: Path
) -> None:
    token = "an-operator-chosen-token-of-enough-length"
    environment = {"OPERATIVE_SERVE_TOKEN": token}
    async with serve(app_dir, elsewhere, "0.0.0.0:0", env=environment) as served:
        assert served.token() is None
        assert token.encode() not in served.output
        status, _ = await request(served, f"127.0.0.1:{served.port}", token=token)
        assert status == 200
        status, _ = await request(served, f"127.0.0.1:{served.port}")
        assert status == 401


async def run_command(*args: str, cwd: Path) -> tuple[int, str]:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "operative", "mcp", "serve", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=cwd,
            env={**os.environ, "NO_COLOR": "1"},
        )
    return done.returncode, done.stderr.decode(errors="replace")


async def test_a_missing_app_dir_is_a_one_line_usage_error(elsewhere: Path) -> None:
    missing = elsewhere / "no-such-dir"
    code, errors = await run_command(
        f"{MODULE_NAME}:tools", "--app-dir", str(missing), "--http", "127.0.0.1:0", cwd=elsewhere
    )
    assert code == 2, errors
    assert errors.count("\n") == 1, errors
    assert errors.startswith("operative: error: --app-dir ")
    assert "is not a directory" in errors
    assert str(missing) in errors


async def test_without_app_dir_another_directory_cannot_import_the_module(
    elsewhere: Path,
) -> None:
    code, errors = await run_command(f"{MODULE_NAME}:tools", cwd=elsewhere)
    assert code == 2, errors
    assert f"cannot import '{MODULE_NAME}'" in errors
    assert "--app-dir" in errors


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--token", "a-token-that-is-long-enough"], "--token only apply to HTTP"),
        (["--http", "127.0.0.1:0", "--token", "short"], "at least 16 characters"),
        (["--http", "127.0.0.1:0", "--allow-origin", "chat.example"], "is not an origin"),
    ],
)
async def test_edge_flags_are_checked(
    app_dir: Path, elsewhere: Path, flags: list[str], message: str
) -> None:
    code, errors = await run_command(
        f"{MODULE_NAME}:tools", "--app-dir", str(app_dir), *flags, cwd=elsewhere
    )
    assert code == 2, errors
    assert message in errors
