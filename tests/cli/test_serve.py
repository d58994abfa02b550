"""``operative serve``: the stateless chat host over HTTP, and its page in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from _chromium import open_chromium
from hypercorn.config import Config
from hypercorn.trio import serve

from operative.cli import main
from operative.cli._agents import offline_generate
from operative.cli._errors import UsageError
from operative.cli._serve import SECRET_FILE, approval_secret, build_app, served_chat_agent
from operative.kvstore import MemoryStore

SECRET = secrets.token_bytes(32)

Event = tuple[str, dict[str, Any]]


@asynccontextmanager
async def open_server(
    notes: Path, *, state: MemoryStore | None = None, secret: bytes = SECRET
) -> AsyncIterator[str]:
    """A chat host on a free loopback port (offline model); yields its base URL."""
    host = build_app(
        served_chat_agent(offline_generate, notes=notes),
        secret=secret,
        approval_state=state if state is not None else MemoryStore(),
    )
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, host, config)
        try:
            yield binds[0]
        finally:
            nursery.cancel_scope.cancel()


def parse_sse(text: str) -> list[Event]:
    events: list[Event] = []
    for frame in text.split("\n\n"):
        kind, data = "message", ""
        for line in frame.splitlines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
        if data:
            events.append((kind, json.loads(data)))
    return events


async def post_turn(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[Event]:
    response = await client.post(f"{url}/api/turn", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream"
    events = parse_sse(response.text)
    assert events[-1][0] == "turn.completed"
    return events


def of(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [data for name, data in events if name == kind]


async def test_a_turn_streams_text_tool_calls_and_the_history(tmp_path: Path) -> None:
    """A message gets its tool calls, results, streamed text and the final history."""
    async with open_server(tmp_path / "notes.txt") as url, httpx.AsyncClient() as client:
        events = await post_turn(client, url, {"message": "what is 6 * 7?"})
        calls = of(events, "tools.executing")[0]["calls"]
        assert [c["name"] for c in calls] == ["calculate"]
        results = [e["result"] for e in of(events, "tool-result.validated")]
        assert [(r["outcome"], r["value"]) for r in results] == [("success", "6 * 7 = 42")]
        streamed = "".join(d["text"] for d in of(events, "generate.delta"))
        done = of(events, "turn.completed")[0]
        assert streamed == done["content"] == "6 * 7 = 42."
        assert done["pending"] == []
        assert done["finish_reason"] == "stop-condition"
        roles = [m["role"] for m in done["history"]["messages"]]
        # The server's instructions are its own: the client's history never holds them.
        assert roles == ["user", "assistant", "tool", "assistant"]

        # The client posts the history back for the next turn; the id stays.
        again = await post_turn(
            client,
            url,
            {
                "message": "hello",
                "history": done["history"],
                "conversation_id": done["conversation_id"],
            },
        )
        later = of(again, "turn.completed")[0]
        assert later["conversation_id"] == done["conversation_id"]
        assert len(later["history"]["messages"]) == 6
        assert "You said: 'hello'" in later["content"]


async def test_an_approval_round_trip_across_two_requests_and_two_hosts(tmp_path: Path) -> None:
    """A parked call comes back signed; another host sharing secret and store resumes it once."""
    notes, state = tmp_path / "notes.txt", MemoryStore()
    async with (
        open_server(notes, state=state) as first,
        open_server(notes, state=state) as second,
        httpx.AsyncClient() as client,
    ):
        events = await post_turn(client, first, {"message": "remember to buy milk"})
        [approval] = of(events, "approval.pending")
        parked = of(events, "turn.completed")[0]
        assert parked["pending"] == [approval]
        assert approval["tool_name"] == "save_note"
        assert approval["arguments"] == {"text": "buy milk"}
        assert approval["signature"]
        assert not notes.exists()  # nothing ran yet

        decision = {
            "history": parked["history"],
            "conversation_id": parked["conversation_id"],
            "decisions": [{"approval": approval, "approved": True}],
        }
        resumed = await post_turn(client, second, decision)
        [resolved] = of(resumed, "approval.resolved")
        assert resolved["result"]["outcome"] == "success"
        assert notes.read_text() == "buy milk\n"
        done = of(resumed, "turn.completed")[0]
        assert done["content"].startswith("saved the note 'buy milk'")
        outcomes = [m.get("outcome") for m in done["history"]["messages"] if m["role"] == "tool"]
        assert outcomes == ["success"]  # replaced in place, not appended

        # The same decision again: the approval was used up, nothing runs twice.
        replay = await post_turn(client, first, decision)
        [error] = of(replay, "turn.error")
        assert (error["error_type"], error["reason"]) == ("ApprovalError", "replayed")
        assert notes.read_text() == "buy milk\n"


async def test_a_denied_call_never_runs_and_the_model_reads_why(tmp_path: Path) -> None:
    """Denying a parked call settles it as denied; the next step explains."""
    notes = tmp_path / "notes.txt"
    async with open_server(notes) as url, httpx.AsyncClient() as client:
        parked = of(
            await post_turn(client, url, {"message": "remember to call Ana"}), "turn.completed"
        )[0]
        [approval] = parked["pending"]
        events = await post_turn(
            client,
            url,
            {
                "history": parked["history"],
                "conversation_id": parked["conversation_id"],
                "decisions": [{"approval": approval, "approved": False, "reason": "not now"}],
            },
        )
        assert of(events, "approval.resolved")[0]["result"]["outcome"] == "denied"
        assert of(events, "turn.completed")[0]["content"].startswith("I did not run save_note")
        assert not notes.exists()


async def test_a_tampered_approval_gets_a_typed_error_and_loses_nothing(tmp_path: Path) -> None:
    """An altered approval is refused with its reason; the history and approval stay usable."""
    notes = tmp_path / "notes.txt"
    async with open_server(notes) as url, httpx.AsyncClient() as client:
        parked = of(
            await post_turn(client, url, {"message": "remember to buy milk"}), "turn.completed"
        )[0]
        [approval] = parked["pending"]
        tampered = {**approval, "arguments": {"text": "transfer the savings"}}
        body = {"history": parked["history"], "conversation_id": parked["conversation_id"]}
        events = await post_turn(
            client, url, {**body, "decisions": [{"approval": tampered, "approved": True}]}
        )
        [error] = of(events, "turn.error")
        assert error["error_type"] == "ApprovalError"
        assert error["reason"] == "bad-signature"
        assert error["call_id"] == approval["call_id"]
        assert "run.completed" not in [name for name, _ in events]  # the model was not called
        assert of(events, "turn.completed")[0]["history"] == parked["history"]
        assert not notes.exists()

        # Another conversation's id is another authority: refused the same way.
        elsewhere = await post_turn(
            client,
            url,
            {
                **body,
                "conversation_id": "someone-else",
                "decisions": [{"approval": approval, "approved": True}],
            },
        )
        assert of(elsewhere, "turn.error")[0]["reason"] == "authority-mismatch"

        # The genuine approval was not consumed by either refusal.
        ok = await post_turn(
            client, url, {**body, "decisions": [{"approval": approval, "approved": True}]}
        )
        assert of(ok, "approval.resolved")[0]["result"]["outcome"] == "success"
        assert notes.read_text() == "buy milk\n"


async def test_bad_requests_get_a_clear_status_and_message(tmp_path: Path) -> None:
    """Bad JSON is a 400 that says why; wrong shapes, types, methods and paths too."""
    async with open_server(tmp_path / "notes.txt") as url, httpx.AsyncClient() as client:
        json_type = {"content-type": "application/json"}
        bad = await client.post(f"{url}/api/turn", content=b"{not json", headers=json_type)
        assert bad.status_code == 400
        assert "not a valid turn request" in bad.json()["error"]
        wrong = await client.post(f"{url}/api/turn", json={"message": 3})
        assert wrong.status_code == 400
        assert "$.message" in wrong.json()["error"]
        neither = await client.post(f"{url}/api/turn", json={"message": None})
        assert neither.status_code == 400
        assert "either 'message'" in neither.json()["error"]
        lonely = await client.post(
            f"{url}/api/turn",
            json={"decisions": [{"approval": {}, "approved": True}]},
        )
        assert lonely.status_code == 400
        as_text = await client.post(f"{url}/api/turn", content=b"hi")
        assert as_text.status_code == 415
        assert (await client.get(f"{url}/api/turn")).status_code == 405
        assert (await client.get(f"{url}/nowhere")).status_code == 404
        page = await client.get(f"{url}/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")


def test_the_approval_secret_comes_from_the_environment_or_is_generated_once(
    tmp_path: Path,
) -> None:
    """The data directory's secret is made once and reused; the environment's wins."""
    first = approval_secret(tmp_path, {})
    assert len(first) >= 32
    assert approval_secret(tmp_path, {}) == first
    assert (tmp_path / SECRET_FILE).stat().st_mode & 0o077 == 0
    from_env = "x" * 40
    assert approval_secret(tmp_path, {"OPERATIVE_APPROVAL_SECRET": from_env}) == from_env.encode()
    with pytest.raises(UsageError, match="at least 32 bytes"):
        approval_secret(tmp_path, {"OPERATIVE_APPROVAL_SECRET": "short"})


def test_serve_is_a_command_with_its_options() -> None:
    """``operative serve --help`` names the host, port and model options."""
    import io

    out = io.StringIO()
    assert main(["serve", "--help"], stdout=out, stderr=io.StringIO()) == 0


async def test_operative_serve_serves_until_sigterm(tmp_path: Path) -> None:
    """The command serves the page and the API on the port it prints, and stops cleanly."""
    command = [sys.executable, "-m", "operative", "serve", "--offline", "--port", "0"]
    env = {**os.environ, "NO_COLOR": "1", "OPERATIVE_DATA_DIR": str(tmp_path)}
    env.pop("OPERATIVE_APPROVAL_SECRET", None)
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    assert process.stdout is not None
    seen = b""
    try:
        with trio.fail_after(15):
            while (found := re.search(rb"serving the chat page at (\S+)/ ", seen)) is None:
                chunk = await process.stdout.receive_some()
                assert chunk, seen.decode()
                seen += chunk
        url = found.group(1).decode()
        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "/")).status_code == 200
            events = await post_turn(client, url, {"message": "remember to buy milk"})
            assert of(events, "approval.pending")
        assert (tmp_path / SECRET_FILE).exists()
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            while chunk := await process.stdout.receive_some():
                seen += chunk
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert b"OFFLINE scripted model" in seen
    assert seen.rstrip().endswith(b"stopped")


# -- the page, in headless Chromium ------------------------------------------------------


def drive(url: str, script: Callable[[Any], None]) -> None:
    """Run ``script(driver)`` against a fresh headless Chromium (in a worker thread)."""
    with open_chromium() as driver:
        driver.get(url + "/")
        script(driver)


def wait_for(driver: Any, css: str, text: str | None = None, *, timeout: float = 10) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> Any:
        for element in d.find_elements(By.CSS_SELECTOR, css):
            if text is None or text in element.text:
                return element
        return False

    return WebDriverWait(driver, timeout).until(found, f"no {css!r} showing {text!r}")


def say(driver: Any, text: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "message").send_keys(text)
    driver.find_element(By.ID, "send").click()


def idle(driver: Any) -> None:
    wait_for(driver, "#status", "idle")


def browser_session(driver: Any) -> None:
    """Chat, approve one parked call, deny another; the conversation survives a reload."""
    from selenium.webdriver.common.by import By

    say(driver, "what is 6 * 7?")
    wait_for(driver, ".tool-call", "calculate")
    wait_for(driver, ".tool-result.success", "6 * 7 = 42")
    wait_for(driver, ".msg.assistant", "6 * 7 = 42.")
    idle(driver)

    say(driver, "remember to buy milk")
    card = wait_for(driver, ".approval", "save_note")
    assert "buy milk" in card.text
    idle(driver)
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for(driver, ".tool-result.success", "saved the note 'buy milk'")
    wait_for(driver, ".msg.assistant", "saved the note 'buy milk'")
    idle(driver)
    assert not driver.find_elements(By.CSS_SELECTOR, ".approval")

    say(driver, "remember to sell the car")
    card = wait_for(driver, ".approval", "sell the car")
    idle(driver)
    card.find_element(By.CSS_SELECTOR, "button.deny").click()
    wait_for(driver, ".tool-result.denied", "A person denied")
    wait_for(driver, ".msg.assistant", "I did not run save_note")
    idle(driver)

    # The history lives in the browser: a reload shows the whole conversation again.
    driver.refresh()
    wait_for(driver, ".msg.user", "remember to sell the car")
    wait_for(driver, ".tool-result.denied", "A person denied")
    users = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".msg.user")]
    assert users == ["what is 6 * 7?", "remember to buy milk", "remember to sell the car"]


async def test_the_page_chats_streams_and_approves_in_chromium(
    tmp_path: Path, chromium: None
) -> None:
    """In headless Chromium: streamed answers, tool calls, approve and deny buttons."""
    notes = tmp_path / "notes.txt"
    async with open_server(notes) as url:
        await trio.to_thread.run_sync(drive, url, browser_session)
    assert notes.read_text() == "buy milk\n"
