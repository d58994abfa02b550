"""Fixtures for the front-end protocol tests: the vendors' npm clients and a served app.

The clients (``ai``, ``@ag-ui/client``) are installed with ``npm ci`` from the committed
``node/package.json`` and ``node/package-lock.json`` into
``~/.cache/operative-tests/npm/ui-<lockfile digest>/`` on first use and reused. Without
Node, npm or the registry those tests skip, except under CI (``CI`` or
``OPERATIVE_REQUIRE_NODE`` set), where they fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from _cached_install import cache_root, install_once
from hypercorn.config import Config
from hypercorn.trio import serve

NODE_DIR = Path(__file__).with_name("node")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") or os.environ.get("OPERATIVE_REQUIRE_NODE"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def ui_node_modules() -> Path:
    """The ``node_modules`` holding the pinned clients (``npm ci`` on first use)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are not on PATH")
    lock = (NODE_DIR / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock + (NODE_DIR / "package.json").read_bytes()).hexdigest()[:16]
    target = cache_root() / "npm" / f"ui-{digest}"
    modules = target / "node_modules"
    if (modules / "ai" / "package.json").is_file():
        return modules
    install_once(
        target,
        lambda _: ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        what="the ui clients with npm",
        unavailable=_unavailable,
        files=[NODE_DIR / "package.json", NODE_DIR / "package-lock.json"],
    )
    return modules


@asynccontextmanager
async def open_ui_server(app: Any) -> AsyncIterator[str]:
    """``app`` under hypercorn (Trio) on a free loopback port; yields its base URL."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        try:
            yield binds[0]
        finally:
            nursery.cancel_scope.cancel()


async def run_node(modules: Path, script: str, *args: str, seconds: float = 60.0) -> dict[str, Any]:
    """``node node/<script> ARGS`` with the clients on hand; its JSON output."""
    env = dict(os.environ, OPERATIVE_UI_NODE_MODULES=str(modules))
    with trio.fail_after(seconds):
        done = await trio.run_process(
            ["node", str(NODE_DIR / script), *args],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    if done.returncode != 0:
        raise AssertionError(
            f"node {script} {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stderr.decode(errors='replace')[-3000:]}"
        )
    result: dict[str, Any] = json.loads(done.stdout)
    return result
