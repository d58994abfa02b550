"""examples/chat_session.py keeps one chat session in a SQLite file across invocations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _chat(database: Path, message: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "chat_session.py"), str(database), message],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=database.parent,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_chat_session_continues_across_two_invocations(tmp_path: Path) -> None:
    """The second invocation sees the first one's transcript and run."""
    database = tmp_path / "chat.db"
    first = _chat(database, "My name is Ada.")
    assert first[:2] == [
        "[scripted model] Noted. (message 1 of this session)",
        "1 runs, 3 messages",
    ]
    second = _chat(database, "What is my name?")
    assert second[:2] == ["[scripted model] Your name is Ada.", "2 runs, 5 messages"]
    assert "finish_reason='stop-condition'" in second[2]
