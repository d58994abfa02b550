"""The stdio server's standard input, read by Trio rather than by a worker thread.

The SDK reads stdin line by line in a worker thread that cannot be abandoned, so a
server waiting for its client could not be stopped by Ctrl-C (Trio waits for the thread,
which waits for input that never comes). Read through a ``trio.lowlevel.FdStream``, a
wait for input is an ordinary cancellation point.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

__all__ = ["stdin_lines"]

_CHUNK = 65536


@asynccontextmanager
async def stdin_lines() -> AsyncIterator[Any]:
    """Standard input as an async iterator of lines (``None`` when stdin is a regular
    file, which cannot be waited on: the SDK then reads it itself).

    Meanwhile file descriptor 0 reads the null device, as the SDK's own reader arranges,
    so a child process a tool starts cannot take the client's messages.
    """
    if stat.S_ISREG(os.fstat(0).st_mode):
        yield None
        return
    reader = os.dup(0)
    saved = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    stream = trio.lowlevel.FdStream(reader)
    try:
        yield _Lines(stream)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        with trio.CancelScope(shield=True):
            await stream.aclose()


class _Lines:
    """The lines of a byte stream, decoded as UTF-8 (what the SDK's reader iterates)."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._ended = False

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line.decode("utf-8", errors="replace")
            if self._ended:
                if not self._buffer:
                    raise StopAsyncIteration
                rest = bytes(self._buffer)
                self._buffer.clear()
                return rest.decode("utf-8", errors="replace")
            chunk = await self._stream.receive_some(_CHUNK)
            if not chunk:
                self._ended = True
            self._buffer += chunk
