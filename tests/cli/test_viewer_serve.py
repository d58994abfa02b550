"""``operative serve``'s run viewer: ``/runs``, ``/runs/{id}`` and their JSON, over a data
directory with completed, aborted, failed, recovered and in-flight runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
from _chromium import open_chromium
from hypercorn.config import Config
from hypercorn.trio import serve

from operative.cli._agents import offline_generate
from operative.cli._serve import build_app, served_chat_agent
from operative.cli._state import DATABASE
from operative.kvstore import MemoryStore
from operative.runstore import SqliteRunStore

from ._process import operative
from ._viewer_runs import RUNS, fill, finish_in_flight

SECRET = b"s" * 32


@asynccontextmanager
async def open_viewer(data_dir: Path) -> AsyncIterator[str]:
    """The chat host with the run viewer in front, on a free loopback port; its URL."""
    agent = served_chat_agent(offline_generate, notes=data_dir / "n.txt")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with SqliteRunStore(data_dir / DATABASE) as store, trio.open_nursery() as nursery:
        app = build_app(agent, secret=SECRET, approval_state=MemoryStore(), runs=store)
        binds = await nursery.start(serve, app, config)
        try:
            yield binds[0]
        finally:
            nursery.cancel_scope.cancel()


def cli_json(*args: str) -> object:
    done = operative(*args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def without_tool_message_ids(detail: object) -> object:
    """A run's detail without its tool messages' ids: a replayed transcript gives those
    new ids at every read."""
    assert isinstance(detail, dict)
    for message in detail["transcript"]["messages"]:
        if message["role"] == "tool":
            del message["id"]
    return detail


async def test_the_json_endpoints_answer_as_the_commands_do(tmp_path: Path) -> None:
    await fill(tmp_path)
    data = ["--data-dir", str(tmp_path), "--json"]
    listed = await trio.to_thread.run_sync(lambda: cli_json("runs", "list", *data))
    shown = await trio.to_thread.run_sync(lambda: cli_json("runs", "show", "failed", *data))
    async with open_viewer(tmp_path) as url, httpx.AsyncClient() as client:
        runs = await client.get(f"{url}/api/runs")
        one = await client.get(f"{url}/api/runs/failed")
        errors = await client.get(f"{url}/api/runs?status=error")
    assert runs.headers["content-type"] == "application/json"
    assert runs.json() == listed
    assert sorted(run["run_id"] for run in runs.json()["runs"]) == sorted(RUNS)
    assert without_tool_message_ids(one.json()) == without_tool_message_ids(shown)
    assert [run["run_id"] for run in errors.json()["runs"]] == ["failed"]


async def test_the_pages_filter_show_errors_and_follow_an_in_flight_run(tmp_path: Path) -> None:
    await fill(tmp_path)
    async with open_viewer(tmp_path) as url, httpx.AsyncClient() as client:
        listing = (await client.get(f"{url}/runs")).text
        aborted = (await client.get(f"{url}/runs", params={"status": "aborted"})).text
        of_agent = (await client.get(f"{url}/runs", params={"agent": "calc"})).text
        failed = (await client.get(f"{url}/runs/failed")).text
        flying = (await client.get(f"{url}/runs/in-flight")).text
        await finish_in_flight(tmp_path)
        landed = (await client.get(f"{url}/runs/in-flight")).text
        chat = await client.get(f"{url}/")
    assert listing.count('<tr class="run"') == len(RUNS)
    assert 'data-live="1"' in listing  # a run is in flight
    assert aborted.count('<tr class="run"') == 1
    assert 'href="/runs/aborted"' in aborted
    assert of_agent.count('<tr class="run"') == 2
    assert "model backend down" in failed
    assert 'data-status="running"' in flying
    assert 'data-live="1"' in flying
    assert 'data-status="completed"' in landed
    assert 'data-live="0"' in landed
    assert "done waiting" in landed
    assert chat.status_code == 200
    assert "/runs" not in chat.text  # the chat page is the chat host's own


async def test_bad_requests_say_what_to_send(tmp_path: Path) -> None:
    await fill(tmp_path)
    async with open_viewer(tmp_path) as url, httpx.AsyncClient() as client:
        missing = await client.get(f"{url}/runs/no-such-run")
        missing_api = await client.get(f"{url}/api/runs/no-such-run")
        status = await client.get(f"{url}/api/runs?status=finished")
        since = await client.get(f"{url}/runs?since=yesterday")
        limit = await client.get(f"{url}/api/runs?limit=0")
        posted = await client.post(f"{url}/api/runs")
    assert missing.status_code == 404
    assert "no run 'no-such-run'" in missing.text
    assert missing_api.status_code == 404
    assert "see /runs" in missing_api.json()["error"]
    assert status.status_code == 400
    assert "send one of running" in status.json()["error"]
    assert since.status_code == 400
    assert "give a duration" in since.json()["error"]
    assert limit.status_code == 400
    assert posted.status_code == 405


def look(url: str, data_dir: Path, shots: Path) -> dict[str, int]:
    """In headless Chromium: what a person looks for on each page; screenshots into
    ``shots``; the in-flight run's page follows it to its end. Page sizes by name."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    sizes: dict[str, int] = {}

    def visit(driver: Any, path: str, name: str) -> None:
        driver.get(url + path)
        sizes[name] = len(driver.page_source.encode())

    def count(driver: Any, css: str) -> int:
        return len(driver.find_elements(By.CSS_SELECTOR, css))

    with open_chromium(width=1400, height=1000) as driver:
        visit(driver, "/runs", "runs")
        rows = driver.find_elements(By.CSS_SELECTOR, "tr.run")
        assert len(rows) == len(RUNS)
        assert {row.get_attribute("data-status") for row in rows} == {
            "completed",
            "aborted",
            "error",
            "running",
        }
        driver.save_screenshot(str(shots / "runs.png"))

        visit(driver, "/runs/completed", "completed")
        assert count(driver, "g.step-row") == 2
        assert count(driver, "rect.bar.tool") == 2
        assert count(driver, "rect.bar.tool.error") == 1  # add(1, "x")
        assert count(driver, "section.step") == 2
        assert "1 + 2 = 3" in driver.find_element(By.CSS_SELECTOR, ".transcript").text
        driver.save_screenshot(str(shots / "completed.png"))

        visit(driver, "/runs/failed", "failed")
        assert "model backend down" in driver.find_element(By.ID, "run-error").text
        driver.save_screenshot(str(shots / "failed.png"))

        visit(driver, "/runs/aborted", "aborted")
        assert "user pressed stop" in driver.find_element(By.ID, "run-abort").text
        assert count(driver, "g.abort-mark") == 1
        driver.save_screenshot(str(shots / "aborted.png"))

        visit(driver, "/runs/recovered", "recovered")
        assert "↻2" in driver.find_element(By.CSS_SELECTOR, "svg.timeline-svg").text
        assert (
            "run again after a worker stopped"
            in driver.find_element(By.CSS_SELECTOR, ".facts").text
        )
        driver.save_screenshot(str(shots / "recovered.png"))

        visit(driver, "/runs/in-flight", "in-flight")
        assert count(driver, "main[data-status=running] rect.bar.tool.in-flight") == 1
        driver.save_screenshot(str(shots / "in-flight.png"))
        trio.from_thread.run(finish_in_flight, data_dir)
        WebDriverWait(driver, 15).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "main[data-status=completed]"),
            "the in-flight run's page did not show it completed",
        )
        assert count(driver, "rect.bar.tool.success") == 1
        assert "done waiting" in driver.find_element(By.CSS_SELECTOR, ".transcript").text
        driver.save_screenshot(str(shots / "in-flight-landed.png"))
    return sizes


async def test_both_pages_in_chromium(tmp_path: Path, chromium: None) -> None:
    """Chromium loads the runs page and each run's page; the in-flight run's page updates
    by itself when the run ends."""
    data_dir = tmp_path / "data"
    await fill(data_dir)
    async with open_viewer(data_dir) as url:
        with trio.fail_after(60):
            sizes = await trio.to_thread.run_sync(look, url, data_dir, tmp_path)
    for name in ("runs", "completed", "failed", "aborted", "recovered", "in-flight"):
        shot = tmp_path / f"{name}.png"
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 10_000, f"{shot} looks blank"
    assert all(size < 64_000 for size in sizes.values()), sizes
