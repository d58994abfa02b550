"""Server-sent event framing shared by the front-end protocols: ``data:`` lines only."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["DONE", "data_frame"]

DONE = b"data: [DONE]\n\n"
"""The Vercel AI SDK stream's last frame (AG-UI must not send it)."""


def data_frame(value: Any) -> bytes:
    """One SSE event holding ``value`` as JSON on a single ``data:`` line, ended by a blank line."""
    return b"data: " + msgspec.json.encode(value) + b"\n\n"
