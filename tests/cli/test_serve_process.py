"""``operative serve`` as a user meets it: a real process, a real port, an HTTP client.

It logs one line per request, serves a favicon, says on the page when the model is the
offline stand-in, and refuses a port in use or out of range in one line, before it
creates anything.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from operative.cli._chat_page import page

from ._process import ROOT, clean_env, operative

LOG_LINE = r"\d\d:\d\d:\d\d {method} {path} {status} \d+\.\d ms"


async def test_requests_are_logged_and_the_favicon_and_offline_notice_served(
    tmp_path: Path,
) -> None:
    """Each request gets a line (method, path, status, time) once it is answered."""
    env = clean_env(OPERATIVE_DATA_DIR=str(tmp_path))
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "operative", "serve", "--offline", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    assert process.stdout is not None
    seen = b""

    async def read_until(pattern: str) -> re.Match[str]:
        nonlocal seen
        while (found := re.search(pattern, seen.decode())) is None:
            chunk = await process.stdout.receive_some()  # type: ignore[union-attr]
            assert chunk, seen.decode()
            seen += chunk
        return found

    try:
        with trio.fail_after(30):
            url = (await read_until(r"serving the chat page at (\S+)/ ")).group(1)
            async with httpx.AsyncClient() as client:
                home = await client.get(url + "/")
                assert home.status_code == 200
                assert 'id="model" class="offline"' in home.text
                assert "Offline stand-in model:" in home.text
                assert 'rel="icon" href="/favicon.svg"' in home.text
                await read_until(LOG_LINE.format(method="GET", path="/", status=200))
                icon = await client.get(url + "/favicon.ico")
                assert icon.status_code == 200
                assert icon.headers["content-type"] == "image/x-icon"
                assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file ...
                assert b"\x89PNG\r\n\x1a\n" in icon.content  # ... holding a PNG
                svg = await client.get(url + "/favicon.svg")
                assert svg.headers["content-type"] == "image/svg+xml"
                assert svg.text.startswith("<svg")
                missing = await client.get(url + "/nope?x=1")
                assert missing.status_code == 404
                turn = await client.post(url + "/api/turn", json={"message": "what is 6 * 7"})
                assert turn.status_code == 200
            for method, path, status in (
                ("GET", "/favicon.ico", 200),
                ("GET", "/favicon.svg", 200),
                ("GET", r"/nope\?x=1", 404),
                ("POST", "/api/turn", 200),
            ):
                await read_until(LOG_LINE.format(method=method, path=path, status=status))
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            while chunk := await process.stdout.receive_some():
                seen += chunk
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    log = [line for line in seen.decode().splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert len(log) == 5  # one line per request, no more


def test_the_page_names_a_real_model() -> None:
    """With a real model the page names it, and carries no offline notice."""
    html = page("anthropic:claude-haiku-4-5", offline=False).decode()
    assert '<p id="model">model: anthropic:claude-haiku-4-5</p>' in html
    assert "Offline stand-in" not in html


def assert_refused(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("operative: error: ")
    for needle in needles:
        assert needle in line, line


def test_a_port_in_use_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    """Another server on the port: the port is named, and how to pick another."""
    data = tmp_path / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = operative("serve", "--offline", "--port", str(port), "--data-dir", str(data))
    assert_refused(done, f"port {port} on 127.0.0.1 is in use", "--port")
    assert not data.exists()


def test_a_port_out_of_range_and_an_unknown_host(tmp_path: Path) -> None:
    """--port 99999 and a host this machine does not have are refused before anything."""
    data = tmp_path / "data"
    done = operative("serve", "--offline", "--port", "99999", "--data-dir", str(data))
    assert_refused(done, "'99999' is not a port", "0 to 65535")
    done = operative("serve", "--offline", "--host", "no.such.host.invalid", "--port", "0")
    assert_refused(done, "--host 'no.such.host.invalid'", "127.0.0.1")
    done = operative("serve", "--offline", "--port", "0", "--data-dir", os.devnull)
    assert_refused(done, os.devnull, "not a directory")
    assert not data.exists()
