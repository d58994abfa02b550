"""Safe by default at the HTTP edge, tried against the real ``operative serve`` process.

DNS rebinding (a foreign ``Host``), cross-origin requests, simple-form CSRF, framing and
the token when bound beyond loopback, on every endpoint and every loopback spelling; bad
input that used to give empty 500s; and ``serve MODULE:OBJECT --app-dir``.
"""

from __future__ import annotations

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

import httpx
import pytest
import trio

from operative._edge import is_loopback

ENDPOINTS = (
    ("GET", "/"),
    ("GET", "/runs"),
    ("GET", "/api/runs"),
    ("POST", "/api/turn"),
    ("POST", "/api/chat"),
    ("POST", "/api/agui"),
)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@asynccontextmanager
async def operative_serve(
    tmp_path: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, str]]:
    """``python -m operative serve ARGS`` on a free port; its base URL and its output so far."""
    command = [sys.executable, "-m", "operative", "serve", "--port", "0", *args]
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))
    }
    environment.pop("OPERATIVE_SERVE_TOKEN", None)
    environment.update(
        NO_COLOR="1",
        OPERATIVE_DATA_DIR=str(tmp_path / "data"),
        PYTHONPATH=str(ROOT),
        **(env or {}),
    )
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment, cwd=cwd
    )
    assert process.stdout is not None
    seen = b""
    try:
        with trio.fail_after(20):
            while (
                found := re.search(rb"serving the chat page at (http://\S+?)/(\S*) ", seen)
            ) is None:
                chunk = await process.stdout.receive_some()
                assert chunk, seen.decode()
                seen += chunk
        yield found.group(1).decode(), seen.decode()
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def request(
    client: httpx.AsyncClient, method: str, url: str, path: str, **headers: str
) -> httpx.Response:
    if method == "POST":
        return await client.post(url + path, json={}, headers=headers)
    return await client.get(url + path, headers=headers)


ROOT = Path(__file__).resolve().parents[2]

SPELLINGS = ["127.0.0.1", "127.0.0.2", "localhost", "::1"]


@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_a_rebound_host_or_a_foreign_origin_is_refused_on_every_endpoint(
    tmp_path: Path, spelling: str
) -> None:
    if spelling == "::1" and not _has_ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    async with (
        operative_serve(tmp_path, "--offline", "--host", spelling) as (url, _),
        httpx.AsyncClient() as client,
    ):
        for method, path in ENDPOINTS:
            rebound = await request(client, method, url, path, host="attacker.example")
            assert rebound.status_code == 403, (path, rebound.text)
            assert "attacker.example" in rebound.json()["error"]
            foreign = await request(client, method, url, path, origin="http://attacker.example")
            assert foreign.status_code == 403, (path, foreign.text)
            assert "cross-origin" in foreign.json()["error"]
        # Every loopback spelling of this machine is still itself.
        port = url.rsplit(":", 1)[1]
        for host in ("127.0.0.1", "127.1", "localhost", "[::1]", "2130706433"):
            page = await client.get(url + "/", headers={"host": f"{host}:{port}"})
            assert page.status_code == 200, (host, page.text)
        same = await client.post(url + "/api/turn", json={"message": "hi"}, headers={"origin": url})
        assert same.status_code == 200


async def test_a_form_post_cannot_start_a_turn(tmp_path: Path) -> None:
    """A cross-site page can post a form without asking: no form type is accepted."""
    async with (
        operative_serve(tmp_path, "--offline") as (url, _),
        httpx.AsyncClient() as client,
    ):
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            posted = await client.post(
                url + "/api/turn", content=b'{"message": "hi"}', headers={"content-type": kind}
            )
            assert posted.status_code == 415, (kind, posted.text)


async def test_pages_refuse_framing_and_sniffing(tmp_path: Path) -> None:
    async with (
        operative_serve(tmp_path, "--offline") as (url, _),
        httpx.AsyncClient() as client,
    ):
        for path in ("/", "/runs", "/api/runs"):
            headers = (await client.get(url + path)).headers
            assert headers["x-frame-options"] == "DENY"
            assert headers["content-security-policy"] == "frame-ancestors 'none'"
            assert headers["x-content-type-options"] == "nosniff"


def _lan_address() -> str | None:
    """An address of this machine beyond loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address: str = probe.getsockname()[0]
        except OSError:
            return None
    return None if is_loopback(address) else address


async def test_bound_beyond_loopback_every_request_needs_the_printed_token(
    tmp_path: Path,
) -> None:
    async with (
        operative_serve(tmp_path, "--offline", "--host", "0.0.0.0") as (url, printed),
        httpx.AsyncClient() as client,
    ):
        found = re.search(r"/\?token=(\S+) ", printed)
        assert found is not None, printed
        token = found.group(1)
        assert len(token) >= 32
        for method, path in ENDPOINTS:
            refused = await request(client, method, url, path)
            assert refused.status_code == 401, (path, refused.text)
            assert "token" in refused.json()["error"]
            wrong = await request(client, method, url, path, authorization="Bearer " + "x" * 43)
            assert wrong.status_code == 401
        bearer = {"authorization": f"Bearer {token}"}
        listed = await client.get(url + "/api/runs", headers=bearer)
        assert listed.status_code == 200, listed.text
        turn = await client.post(url + "/api/turn", json={"message": "hi"}, headers=bearer)
        assert turn.status_code == 200
        # The printed address sets a cookie and takes the token out of the address bar.
        opened = await client.get(f"{url}/?token={token}")
        assert opened.status_code == 303
        assert opened.headers["location"] == "/"
        assert "HttpOnly" in opened.headers["set-cookie"]
        assert "SameSite=Strict" in opened.headers["set-cookie"]
        page = await client.get(url + "/", headers={"cookie": f"operative_token={token}"})
        assert page.status_code == 200
        lan = _lan_address()
        if lan is not None:  # a name beyond loopback is answered, with the token
            port = url.rsplit(":", 1)[1]
            remote = await client.get(f"http://{lan}:{port}/api/runs", headers=bearer)
            assert remote.status_code == 200


async def test_allow_host_opens_a_name_for_a_reverse_proxy(tmp_path: Path) -> None:
    async with (
        operative_serve(tmp_path, "--offline", "--allow-host", "chat.example.com") as (url, _),
        httpx.AsyncClient() as client,
    ):
        proxied = await client.get(url + "/", headers={"host": "chat.example.com"})
        assert proxied.status_code == 200
        other = await client.get(url + "/", headers={"host": "evil.example.com"})
        assert other.status_code == 403


async def test_bad_viewer_input_is_a_400_never_a_500(tmp_path: Path) -> None:
    async with (
        operative_serve(tmp_path, "--offline") as (url, _),
        httpx.AsyncClient() as client,
    ):
        checks = {
            "/api/runs?after=garbage": "cursor",
            "/api/runs?since=0001-01-01": "since",
            "/api/runs/run%00id": "run id",
            "/runs/run%00id": "run id",
            "/api/runs?limit=99999999999999999999999": "limit",
        }
        for path, named in checks.items():
            answer = await client.get(url + path)
            assert answer.status_code == 400, (path, answer.status_code, answer.text)
            assert named in answer.json()["error"], (path, answer.text)
        deep = b'{"message": "hi", "history": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        for endpoint in ("/api/turn", "/api/chat", "/api/agui"):
            answer = await client.post(
                url + endpoint, content=deep, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400, (endpoint, answer.text)
            assert "nested deeper" in answer.json()["error"]


async def test_serve_serves_your_own_agent_from_its_app_dir(tmp_path: Path) -> None:
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "my_agent.py").write_text(
        textwrap.dedent(
            """
            from operative import GenerateResponse, create_agent

            async def generate(request):
                return GenerateResponse(content="the publisher answers")

            agent = create_agent(generate=generate, name="publisher", instructions="Publish.")
            """
        )
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with (
        operative_serve(tmp_path, "my_agent:agent", "--app-dir", str(app_dir), cwd=elsewhere) as (
            url,
            printed,
        ),
        httpx.AsyncClient() as client,
    ):
        assert "agent: publisher" in printed
        turn = await client.post(url + "/api/turn", json={"message": "hi"})
        assert "the publisher answers" in turn.text
        chat = await client.post(
            url + "/api/chat",
            json={
                "id": "c",
                "messages": [
                    {"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
                ],
            },
        )
        assert "the publisher answers" in chat.text


def test_serve_names_a_missing_app_dir_or_a_non_agent(tmp_path: Path) -> None:
    environment = {**os.environ, "NO_COLOR": "1", "OPERATIVE_DATA_DIR": str(tmp_path)}
    missing = subprocess.run(
        [sys.executable, "-m", "operative", "serve", "m:agent", "--app-dir", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    assert missing.returncode == 2
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    (tmp_path / "tools_only.py").write_text("value = 42\n")
    wrong = subprocess.run(
        [
            sys.executable,
            "-m",
            "operative",
            "serve",
            "tools_only:value",
            "--app-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    assert wrong.returncode == 2
    assert "not an agent" in wrong.stderr
