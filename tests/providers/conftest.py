"""The local wire-format server every provider test talks to."""

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
