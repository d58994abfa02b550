"""Ctrl-C is a shutdown, tried as a user meets it: a real process, a real SIGINT (and
SIGTERM, as a process manager sends it).

The command exits with code 130 (143 for SIGTERM) and one line on standard error (no
traceback); the durable run it was in the middle of keeps its record ``running`` with no
outcome and no lease, and ``operative recover`` (or ``recover()``, in a second process)
finishes it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

# Real signals to real command processes, then recover in another: seconds a test.
pytestmark = pytest.mark.heavy

_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPERATIVE_MODEL")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _KEYS}
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1", **extra)
    return env


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "operative", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _read_until(stream: IO[bytes], marker: bytes, seen: bytearray, timeout: float = 60) -> None:
    """Read ``stream`` into ``seen`` until ``marker`` shows (a wait on the pipe, no sleep)."""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{marker!r} never came; the output was:\n{seen.decode()}"
        ready, _, _ = select.select([stream], [], [], remaining)
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            assert chunk, f"the process ended before {marker!r}:\n{seen.decode()}"
            seen += chunk


def _interrupt(
    proc: subprocess.Popen[bytes], signum: signal.Signals = signal.SIGINT
) -> tuple[int, str, str]:
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out.decode(), err.decode()


def _command(args: list[str], env: dict[str, str], stdin: str = "") -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "operative", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def _runs(data: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    code, out, err = _command(["runs", "list", "--json", "--data-dir", str(data)], env)
    assert code == 0, err
    runs: list[dict[str, Any]] = json.loads(out)["runs"]
    return runs


def _assert_one_line(err: str) -> None:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("operative: "), err
    assert "operative recover" in lines[0], err


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An OpenAI-compatible base URL whose server accepts connections and never answers:
    the run waits in generate for as long as the test wants."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        port = listener.getsockname()[1]
        yield f"http://127.0.0.1:{port}/v1"


def test_ctrl_c_at_an_approval_prompt_leaves_the_turn_for_recover(tmp_path: Path) -> None:
    """SIGINT while ``chat`` asks ``[y/N]``: exit 130, one line; the run stays running
    with no outcome; ``recover`` finishes it."""
    env = _env()
    data = str(tmp_path)
    proc = _start(["chat", "--offline", "--session", "notes", "--data-dir", data], env)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(b"remember to buy milk\n")
    proc.stdin.flush()
    _read_until(proc.stdout, b"[y/N]", bytearray())
    code, _, err = _interrupt(proc)
    assert code == 130, err
    _assert_one_line(err)

    (run,) = _runs(tmp_path, env)
    assert run["status"] == "running"
    assert run["finish_reason"] is None
    assert not (tmp_path / "notes.txt").exists()

    # The call never ran (it waited for the person), so recovery asks again.
    code, out, err = _command(["recover", "--offline", "--data-dir", data], env, stdin="y\n")
    assert code == 0, err
    assert "approve save_note(text='buy milk')? [y/N]" in out, out
    assert (tmp_path / "notes.txt").read_text().splitlines() == ["buy milk"]
    assert f"resumed {run['run_id']} (session 'notes'): stop-condition" in out, out
    (after,) = _runs(tmp_path, env)
    assert after["status"] == "completed"
    code, out, err = _command(["sessions", "show", "notes", "--json", "--data-dir", data], env)
    session = json.loads(out)
    assert session["runs"][-1]["outcome"]["finish_reason"] == "stop-condition"


@pytest.mark.parametrize(
    ("signum", "exit_code", "what"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_in_generate_leaves_the_run_for_recover(
    tmp_path: Path, silent_server: str, signum: signal.Signals, exit_code: int, what: str
) -> None:
    """Ctrl-C, or SIGTERM (``docker stop``, systemd), while ``demo`` waits for the model:
    the shell's exit code, one line, no traceback; the run's lease is released, so
    ``recover`` takes it at once (a process ended on the spot would hold it for 30 s)
    and finishes it."""
    env = _env(OPENAI_BASE_URL=silent_server, OPENAI_API_KEY="sk-test")
    data = str(tmp_path)
    proc = _start(["demo", "--data-dir", data], env)
    assert proc.stdout is not None
    _read_until(proc.stdout, b"step 1", bytearray())
    code, _, err = _interrupt(proc, signum)
    assert code == exit_code, err
    _assert_one_line(err)
    assert err.startswith(f"operative: {what}; "), err
    (run,) = _runs(tmp_path, env)
    assert run["status"] == "running"
    assert run["finish_reason"] is None

    code, out, err = _command(["recover", "--offline", "--data-dir", data], env)
    assert code == 0, err
    assert f"resumed {run['run_id']} (session 'demo'): stop-condition" in out, out
    assert "still running" not in out
    (after,) = _runs(tmp_path, env)
    assert after["status"] == "completed"


_WORKER = textwrap.dedent(
    """
    import sys
    import trio
    from operative import GenerateResponse, ToolCall, create_agent, tool
    from operative.durable import Durable, SqliteDurable, recover

    path, mode = sys.argv[1], sys.argv[2]
    calls = []

    @tool(idempotent=True)
    async def slow(n: int) -> str:
        \"\"\"Takes its time.\"\"\"
        calls.append(n)
        if mode == "first":
            print("in the tool", flush=True)
            await trio.sleep_forever()
        return f"slow {n}"

    async def generate(request):
        if any(m.role == "tool" for m in request.conversation.messages):
            return GenerateResponse(content="done")
        return GenerateResponse(tool_calls=(ToolCall(id="c1", name="slow", arguments={"n": 7}),))

    agent = create_agent(generate=generate, tools=[slow], name="worker")

    async def main():
        async with SqliteDurable(path) as backend:
            if mode == "first":
                durable = Durable(backend, run_id="r1")
                async with agent.open_run("go", durable=durable) as run:
                    await run.result()
            else:
                results = await recover(backend, agents={"worker": agent})
                record = await backend.engine.get("r1")
                print(record.status, [r.content for r in results.values()], calls, flush=True)

    trio.run(main)
    """
)


def test_ctrl_c_in_a_tool_is_a_shutdown_for_the_library(tmp_path: Path) -> None:
    """A Trio program interrupted while its durable run is in a tool: the record stays
    running, unleased and without an outcome, and recover() in another process finishes
    it at once (no lease to wait out)."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    db = str(tmp_path / "runs.db")
    proc = subprocess.Popen(
        [sys.executable, str(script), db, "first"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout is not None
    _read_until(proc.stdout, b"in the tool", bytearray())
    code, _, err = _interrupt(proc)
    assert code != 0, err
    assert "KeyboardInterrupt" in err, err
    done = subprocess.run(
        [sys.executable, str(script), db, "second"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed ['done'] [7]", done.stdout
