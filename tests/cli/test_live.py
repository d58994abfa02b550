"""Progress while the model works: on a terminal (a real pty) a live status with the
elapsed time, the text streaming in and the tools in flight; piped, plain lines. Either
way the assistant's text comes before its step's token line."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Sequence

import trio

from ._fake_openai import Answer, open_fake_openai
from ._process import ROOT, clean_env

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A child process whose standard output and error are a pseudo-terminal."""

    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        self.args = list(args)
        self.env = env
        self.seen = ""
        self.process: trio.Process | None = None
        self._stream: trio.lowlevel.FdStream | None = None

    async def start(self, stdin: bytes = b"") -> None:
        leader, follower = os.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "operative", *self.args],
            stdin=subprocess.PIPE,
            stdout=follower,
            stderr=follower,
            env=self.env,
            cwd=ROOT,
        )
        os.close(follower)
        self._stream = trio.lowlevel.FdStream(leader)
        assert self.process.stdin is not None
        await self.process.stdin.send_all(stdin)
        await self.process.stdin.aclose()

    async def read_more(self) -> None:
        """Read what the terminal shows next (escapes and all); fail at its end."""
        assert self._stream is not None
        try:
            chunk = await self._stream.receive_some(65536)
        except trio.BrokenResourceError:  # EIO: the child closed the terminal
            chunk = b""
        assert chunk, f"the terminal closed; it showed:\n{self.seen!r}"
        self.seen += chunk.decode(errors="replace")

    async def read_until(self, pattern: str) -> re.Match[str]:
        """Read the terminal until ``pattern`` matches what it showed."""
        while (found := re.search(pattern, self.seen)) is None:
            await self.read_more()
        return found

    async def finish(self) -> int:
        assert self._stream is not None
        assert self.process is not None
        while True:
            try:
                chunk = await self._stream.receive_some(65536)
            except trio.BrokenResourceError:
                break
            if not chunk:
                break
            self.seen += chunk.decode(errors="replace")
        await self._stream.aclose()
        return await self.process.wait()


def terminal_env(**extra: str) -> dict[str, str]:
    env = clean_env(TERM="xterm-256color", **extra)
    del env["NO_COLOR"]
    return env


async def test_a_terminal_shows_elapsed_time_and_the_text_while_the_model_is_slow(
    tmp_path: object,
) -> None:
    """The status moves while the model holds its answer; the text streams into it; once
    done, the answer is a line of its own before the token line, and the status is gone."""
    async with open_fake_openai() as server:
        answer = Answer(pieces=("The weather ", "is fine."), hold=1)
        server.replies.append(answer)
        env = terminal_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=server.url)
        terminal = Terminal(
            ["chat", "--model", "openai:gpt-test", "--data-dir", str(tmp_path)], env
        )
        with trio.fail_after(60):
            await terminal.start(b"how is the weather?\n")
            await terminal.read_until(r"The weather ")  # streamed into the status
            clock = r"the model is writing · (\d+\.\d) s"
            while len(set(re.findall(clock, terminal.seen))) < 2:
                await terminal.read_more()  # the clock moves while the model is silent
            assert "assistant: " not in terminal.seen
            answer.released.set()
            assert await terminal.finish() == 0
    screen = terminal.seen
    assert "\x1b[?25l" in screen  # the live display hid the cursor ...
    assert screen.count("\x1b[?25h") >= 1  # ... and gave it back
    text = screen.index("assistant: The weather is fine.")
    tokens = screen.index("model gpt-test: 10 in, 5 out tokens")
    assert text < tokens
    assert "waiting for the model" in screen
    assert "step 1 · " in screen


async def test_a_terminal_shows_the_tools_in_flight(tmp_path: object) -> None:
    """The demo's tool calls show in the status while they run."""
    terminal = Terminal(["demo", "--offline", "--data-dir", str(tmp_path)], terminal_env())
    with trio.fail_after(60):
        await terminal.start()
        assert await terminal.finish() == 0
    screen = terminal.seen
    assert "running get_weather(city='Lisbon'), calculate(expression='17 * 23 + 4')" in screen
    plain = ESCAPE.sub("", screen)
    assert "answer: Lisbon:" in plain


async def test_piped_output_is_plain_lines_in_the_order_of_events(tmp_path: object) -> None:
    """Piped, the text streams as it comes (before the model is done), nothing is redrawn,
    and each step's text precedes its token line."""
    async with open_fake_openai() as server:
        answer = Answer(pieces=("The weather ", "is fine."), hold=1)
        server.replies.append(answer)
        env = clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=server.url)
        command = [sys.executable, "-m", "operative", "chat", "--model", "openai:gpt-test"]
        process = await trio.lowlevel.open_process(
            [*command, "--data-dir", str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.send_all(b"how is the weather?\n")
        await process.stdin.aclose()
        seen = b""
        with trio.fail_after(60):
            while b"assistant: The weather " not in seen:
                chunk = await process.stdout.receive_some()
                assert chunk, seen.decode()
                seen += chunk
            answer.released.set()
            while chunk := await process.stdout.receive_some():
                seen += chunk
            assert await process.wait() == 0
    out = seen.decode()
    assert "\x1b" not in out
    assert "waiting for the model" not in out
    lines = out.splitlines()
    text = lines.index("assistant: The weather is fine.")
    assert lines[text + 1].startswith("  model gpt-test: 10 in, 5 out tokens")


def test_a_step_s_text_precedes_its_token_line_without_streaming(tmp_path: object) -> None:
    """The offline model does not stream a step that calls tools: its text is still shown,
    before that step's token line, and the streamed final answer before its own."""
    done = subprocess.run(
        [sys.executable, "-m", "operative", "chat", "--offline", "--data-dir", str(tmp_path)],
        input="what is 6 * 7\n",
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = lines.index("assistant: Let me use calculate.")
    assert lines[first - 1] == "· step 1"
    assert lines[first + 1].startswith("  model offline-scripted: ")
    final = lines.index("assistant: 6 * 7 = 42.")
    assert lines[final - 1] == "· step 2"
    assert lines[final + 1].startswith("  model offline-scripted: ")
    assert lines.count("assistant: 6 * 7 = 42.") == 1
