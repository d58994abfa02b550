"""A ``useChat`` page (React and ``@ai-sdk/react`` from npm, bundled by npm's esbuild) in
headless Chromium against ``asgi_app``: a tool-using turn and an approved call, then a
screenshot of the page."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import trio
from _chromium import open_chromium

from operative import create_agent
from operative.cli._agents import _note_tool, calculate, get_weather, offline_generate
from operative.kvstore import MemoryStore
from operative.tools import ApprovalPolicy, Toolbox
from operative.ui import asgi_app

from .conftest import NODE_DIR, open_ui_server

HTML = (
    b"<!doctype html><meta charset=utf-8><title>useChat + operative</title>"
    b'<div id="root"></div><script type="module" src="/page.js"></script>\n'
)


def bundle(modules: Path, out: Path) -> bytes:
    """The page's script: usechat_page.jsx bundled with its npm imports."""
    done = subprocess.run(
        [
            str(modules / ".bin" / "esbuild"),
            str(NODE_DIR / "usechat_page.jsx"),
            "--bundle",
            "--format=esm",
            "--jsx=automatic",
            "--define:process.env.NODE_ENV='production'",
            f"--outfile={out}",
            "--log-level=error",
        ],
        env=dict(os.environ, NODE_PATH=str(modules)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out.read_bytes()


def with_page(app: Any, script: bytes) -> Any:
    """``app``, with the page at ``/`` and its script at ``/page.js``."""

    async def served(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in ("/", "/page.js"):
            body, kind = (
                (HTML, b"text/html") if scope["path"] == "/" else (script, b"text/javascript")
            )
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return served


def browse(url: str, screenshot: Path) -> None:
    """In headless Chromium: ask for the weather, then approve a note; screenshot the page."""
    with open_chromium(width=900, height=900) as driver:
        _browse(driver, url, screenshot)


def _browse(driver: Any, url: str, screenshot: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(css: str, text: str) -> Any:
        def found(d: Any) -> Any:
            for element in d.find_elements(By.CSS_SELECTOR, css):
                if text in element.text:
                    return element
            return False

        return WebDriverWait(driver, 15).until(found, f"no {css!r} showing {text!r}")

    def say(text: str) -> None:
        shown("#status", "ready")
        driver.find_element(By.ID, "message").send_keys(text)
        driver.find_element(By.ID, "send").click()

    driver.get(url + "/")
    say("weather in Lisbon")
    shown(".tool.output-available", "get_weather")
    shown(".msg.assistant .text", "Lisbon: ")
    say("remember to buy milk")
    shown(".tool.approval-requested", "save_note").find_element(
        By.CSS_SELECTOR, "button.approve"
    ).click()
    shown(".tool.output-available", "saved the note 'buy milk'")
    shown(".msg.assistant .text", "saved the note 'buy milk'")
    shown("#status", "ready")
    assert not driver.find_elements(By.ID, "error")
    driver.save_screenshot(str(screenshot))


async def test_a_usechat_page_in_chromium_chats_and_approves(
    tmp_path: Path, ui_node_modules: Path, chromium: None
) -> None:
    script = await trio.to_thread.run_sync(bundle, ui_node_modules, tmp_path / "page.js")
    notes = tmp_path / "notes.txt"
    toolbox = Toolbox(
        [get_weather, calculate, _note_tool(notes)],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
    )
    agent = create_agent(generate=offline_generate, toolbox=toolbox, instructions="Be brief.")
    app = asgi_app(agent, approval_secret=secrets.token_bytes(32), approval_state=MemoryStore())
    screenshot = tmp_path / "usechat.png"
    async with open_ui_server(with_page(app, script)) as url:
        with trio.fail_after(90):
            await trio.to_thread.run_sync(browse, url, screenshot)
    assert notes.read_text() == "buy milk\n"
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
