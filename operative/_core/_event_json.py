"""Run events as JSON for hosts (server-sent events, log lines): never fails to encode.

Events are msgspec Structs and encode as they are; a value JSON cannot hold (a tool's
return value of some user type, say) is written as its ``repr`` instead of failing the
stream or the log line.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["event_json"]


def _fallback(value: Any) -> Any:
    return repr(value)


_encoder = msgspec.json.Encoder(enc_hook=_fallback)


def event_json(event: Any) -> bytes:
    """One event as compact JSON bytes (one line: JSON escapes every newline)."""
    return _encoder.encode(event)
