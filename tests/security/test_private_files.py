"""What the command keeps is private: a data directory it creates is 0700, and the
database (with its ``-wal`` and ``-shm`` files), ``notes.txt`` and ``approval-secret``
are 0600, under a umask that would have made them 0755 and 0644.

Each test runs the real command (``python -m operative``) in a process of its own whose
umask is set before it starts, and reads the modes with ``os.stat`` while it runs (the
``-wal`` and ``-shm`` files exist only while the database is open).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cli._process import operative

from operative.kvstore import Put, SqliteStore

from ._command import start, stop, with_umask

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def assert_database_private(database: Path) -> None:
    """The database and the two files SQLite keeps beside it while it is open."""
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        assert path.exists(), f"{path} is not there while the database is open"
        assert mode(path) == PRIVATE_FILE, f"{path}: {oct(mode(path))}"


@pytest.mark.parametrize("umask", [0o022, 0o000])
async def test_chat_keeps_its_database_and_notes_private(tmp_path: Path, umask: int) -> None:
    """``operative chat`` in a data directory it creates (a parent too): the directory is
    0700, the database files and the note it saves 0600; the parent it had to create
    gets the usual mode."""
    data_dir = tmp_path / "new-parent" / "data"
    child = await start("chat", "--offline", umask=umask, data_dir=data_dir)
    try:
        with trio.fail_after(60):
            await child.read_until(r"you> ")
            assert mode(data_dir) == PRIVATE_DIR
            assert mode(data_dir.parent) == 0o777 & ~umask  # not operative's to narrow
            await child.send("remember to buy milk")
            await child.read_until(r"approve save_note\(.*\)\? \[y/N\] ")
            assert_database_private(
                data_dir / "operative.db"
            )  # open, mid-turn: -wal and -shm are there
            assert not (data_dir / "notes.txt").exists()
            await child.send("y")
            await child.read_until(r"saved the note")
            await child.read_until(r"you> ")
            assert (data_dir / "notes.txt").read_text() == "buy milk\n"
            assert mode(data_dir / "notes.txt") == PRIVATE_FILE
            assert_database_private(data_dir / "operative.db")
    finally:
        await stop(child, terminate=False)
    assert mode(data_dir) == PRIVATE_DIR
    assert mode(data_dir / "operative.db") == PRIVATE_FILE


async def test_serve_keeps_its_database_secret_and_notes_private(tmp_path: Path) -> None:
    """``operative serve``: the approval secret it generates, its database and the note
    an approved call saves are 0600, the data directory 0700."""
    data_dir = tmp_path / "data"
    child = await start("serve", "--offline", "--port", "0", umask=0o022, data_dir=data_dir)
    try:
        with trio.fail_after(60):
            url = (await child.read_until(r"serving the chat page at (\S+)/ ")).group(1)
            assert mode(data_dir) == PRIVATE_DIR
            assert mode(data_dir / "approval-secret") == PRIVATE_FILE
            async with httpx.AsyncClient(timeout=30) as client:
                parked = await client.post(
                    f"{url}/api/turn", json={"message": "remember to buy milk"}
                )
                done = _last(parked.text, "turn.completed")
                [approval] = done["pending"]
                resumed = await client.post(
                    f"{url}/api/turn",
                    json={
                        "history": done["history"],
                        "conversation_id": done["conversation_id"],
                        "decisions": [{"approval": approval, "approved": True}],
                    },
                )
                assert resumed.status_code == 200
            assert (data_dir / "notes.txt").read_text() == "buy milk\n"
            assert mode(data_dir / "notes.txt") == PRIVATE_FILE
            assert_database_private(data_dir / "operative.db")
    finally:
        await stop(child, terminate=True)


def _last(sse: str, kind: str) -> dict[str, Any]:
    found = [
        json.loads(frame.split("\ndata: ", 1)[1])
        for frame in sse.split("\n\n")
        if frame.startswith(f"event: {kind}\n")
    ]
    assert found, sse
    data: dict[str, Any] = found[-1]
    return data


def test_existing_files_and_directories_keep_their_modes(tmp_path: Path) -> None:
    """A directory and files the user made keep the modes the user gave them: the
    command narrows only what it creates."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    os.chmod(data_dir, 0o755)
    done = operative("demo", "--offline", "--data-dir", str(data_dir), preexec_fn=with_umask(0o022))
    assert done.returncode == 0, done.stderr
    assert mode(data_dir) == 0o755
    assert mode(data_dir / "operative.db") == PRIVATE_FILE  # the command created it

    os.chmod(data_dir / "operative.db", 0o640)  # the user's choice
    done = operative("demo", "--offline", "--data-dir", str(data_dir), preexec_fn=with_umask(0o022))
    assert done.returncode == 0, done.stderr
    assert mode(data_dir / "operative.db") == 0o640


async def test_a_library_store_creates_its_file_private(tmp_path: Path) -> None:
    """A SQLite store opened at a path of the user's creates a new file 0600 (it holds
    transcripts), its -wal and -shm too; an existing file keeps its mode."""
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.db"
        async with SqliteStore(fresh) as store:
            await store.conditional_batch([Put(key="k", value="v")])
            assert_database_private(fresh)
        kept = tmp_path / "kept.db"
        kept.touch(mode=0o644)
        async with SqliteStore(kept) as store:
            await store.conditional_batch([Put(key="k", value="v")])
            assert mode(kept) == 0o644
    finally:
        os.umask(old)
