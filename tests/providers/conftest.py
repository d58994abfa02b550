"""The local wire-format server every provider test talks to, and the ``realserver`` switch.

Tests marked ``realserver`` drive an adapter against a real server started by the test
(``test_openai_real_server.py``: llama-cpp-python's OpenAI-compatible server with a small
model). They are deselected (not skipped) unless ``-m realserver`` selects them or
``OPERATIVE_REALSERVER=1`` is set, so the default ``pytest`` run stays fast and offline.
"""

from __future__ import annotations

import os
import re

import pytest
import trio

from ._server import WireServer


def realserver_requested(config: pytest.Config) -> bool:
    """``OPERATIVE_REALSERVER`` is set (and not ``0``), or ``-m`` selects ``realserver``."""
    if os.environ.get("OPERATIVE_REALSERVER", "0") not in ("", "0"):
        return True
    expression = str(config.getoption("markexpr", "") or "")
    return re.search(r"(?<!not )\brealserver\b", expression) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if realserver_requested(config):
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        (left_out if item.get_closest_marker("realserver") else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.fixture
async def wire_server(nursery: trio.Nursery) -> WireServer:
    """A server on 127.0.0.1 with an ephemeral port, stopped when the test ends."""
    server = WireServer()
    await server.start(nursery)
    return server
