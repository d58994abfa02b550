"""The local wire-format server every provider test talks to.

Tests marked ``realserver`` drive an adapter against a real server started by the test
(``test_openai_real_server.py``: llama-cpp-python's OpenAI-compatible server with a small
model); ``tests/conftest.py`` deselects them unless ``-m realserver`` selects them or
``OPERATIVE_REALSERVER=1`` is set, so the default ``pytest`` run stays fast and offline.
"""

from __future__ import annotations

import pytest
import trio

from ._server import WireServer


@pytest.fixture
async def wire_server(nursery: trio.Nursery) -> WireServer:
    """A server on 127.0.0.1 with an ephemeral port, stopped when the test ends."""
    server = WireServer()
    await server.start(nursery)
    return server
