"""A running ``python -m operative ...`` the tests talk to: its output read up to a
pattern, lines sent to its standard input, stopped by end of input or SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import trio
from cli._process import ROOT, clean_env

__all__ = ["Child", "start", "stop", "with_umask"]


def with_umask(mask: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child starts with ``mask`` as its umask."""

    def set_umask() -> None:
        os.umask(mask)

    return set_umask


class Child:
    """A running ``python -m operative ...``: its output read up to a pattern, its stdin."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.seen = b""

    async def read_until(self, pattern: str) -> re.Match[str]:
        stdout = self.process.stdout
        assert stdout is not None
        while (found := re.search(pattern, self.seen.decode(errors="replace"))) is None:
            chunk = await stdout.receive_some()
            assert chunk, self.seen.decode(errors="replace")
            self.seen += chunk
        return found

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line.encode() + b"\n")


async def start(*args: str, data_dir: Path, umask: int = 0o022) -> Child:
    """``python -m operative ARGS --data-dir DATA_DIR`` started with ``umask``."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "operative", *args, "--data-dir", str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=clean_env(),
        cwd=ROOT,
        preexec_fn=with_umask(umask),
    )
    return Child(process)


async def stop(child: Child, *, terminate: bool) -> None:
    process = child.process
    try:
        if terminate:
            process.send_signal(signal.SIGTERM)
        else:
            assert process.stdin is not None
            await process.stdin.aclose()  # end of input: the chat ends
        with trio.fail_after(30):
            stdout = process.stdout
            assert stdout is not None
            while chunk := await stdout.receive_some():
                child.seen += chunk
            assert await process.wait() == 0, child.seen.decode(errors="replace")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
