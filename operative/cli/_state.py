"""The command's state directory: one SQLite file for sessions, durable runs and the run store.

A data directory that cannot be one (a file, a path through a file, a directory nobody
may read or write) is a :class:`UsageError` naming the path and what to do, found before
anything is created or written; so is a database the command cannot open.

What it holds is private: transcripts, notes, the approval secret. A data directory the
command creates is ``0700`` (its missing parents get the usual mode), and every file it
creates there is ``0600``: the database (SQLite gives its ``-wal`` and ``-shm`` files the
database's mode), ``notes.txt`` and ``approval-secret``. A directory or file that already
exists keeps its mode: the command never changes a mode it did not set.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from ._errors import UsageError, no_room

if TYPE_CHECKING:  # loaded by open_state, so the parser (and --help) stays light
    from ..durable import SqliteDurable, SqliteEngine
    from ..kvstore import SqliteStore
    from ..runstore import SqliteRunStore
    from ..sessions import SessionStore

__all__ = [
    "DATABASE",
    "PRIVATE_DIR",
    "State",
    "check_data_dir",
    "default_data_dir",
    "make_data_dir",
    "open_state",
]

DATABASE = "operative.db"


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$OPERATIVE_DATA_DIR``, else ``$XDG_DATA_HOME/operative``, else
    ``~/.local/share/operative``."""
    if env.get("OPERATIVE_DATA_DIR"):
        return Path(env["OPERATIVE_DATA_DIR"])
    base = env.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "operative"


_ANOTHER = "pass another --data-dir (or set OPERATIVE_DATA_DIR)"


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _first_file(path: Path) -> Path | None:
    """The first component of ``path`` that exists and is not a directory."""
    for part in reversed((path, *path.parents)):
        try:
            if not stat.S_ISDIR(os.stat(part).st_mode):
                return part
        except OSError:
            return None
    return None


def check_data_dir(data_dir: Path, *, writing: bool = False) -> bool:
    """Whether ``data_dir`` holds the database; only reads, never creates anything.

    ``False`` when nothing is stored there yet (the directory may not exist). Raises
    UsageError when ``data_dir`` is not a directory or cannot be read (with ``writing``:
    or written), naming the path and what to do.
    """
    try:
        mode = os.stat(data_dir).st_mode
    except FileNotFoundError:
        return False  # created on first use
    except NotADirectoryError:
        file = _first_file(data_dir)
        where = f"{file} is a file" if file is not None else "a part of it is a file"
        raise UsageError(f"--data-dir {data_dir}: {where}, not a directory: {_ANOTHER}") from None
    except OSError as error:
        raise UsageError(
            f"--data-dir {data_dir}: cannot read it ({_why(error)}): {_ANOTHER}"
        ) from None
    if not stat.S_ISDIR(mode):
        raise UsageError(
            f"--data-dir {data_dir} is a file, not a directory: pass the directory that "
            f"holds {DATABASE} (a new one is created on first use), or set OPERATIVE_DATA_DIR"
        )
    database = data_dir / DATABASE
    try:
        mode = os.stat(database).st_mode
    except FileNotFoundError:
        exists = False
    except OSError as error:
        raise UsageError(
            f"--data-dir {data_dir}: cannot read the directory ({_why(error)}): make it "
            f"readable, or {_ANOTHER}"
        ) from None
    else:
        exists = True
        if not stat.S_ISREG(mode):
            raise UsageError(
                f"{database} is not a database file (it is a directory or a device): move "
                f"it away, or {_ANOTHER}"
            )
        try:
            with open(database, "rb"):
                pass
        except OSError as error:
            raise UsageError(
                f"cannot read {database} ({_why(error)}): make it readable, or {_ANOTHER}"
            ) from None
    if writing:
        # SQLite writes beside the database too (its -wal and -shm files).
        for target in (data_dir, database) if exists else (data_dir,):
            if not os.access(target, os.W_OK):
                raise UsageError(
                    f"cannot write to {target} (permission denied, or a read-only file "
                    f"system): make it writable, or {_ANOTHER}"
                )
    return exists


PRIVATE_DIR = 0o700
"""The mode of a data directory the command creates (only its owner may enter it)."""


def make_data_dir(data_dir: Path) -> None:
    """Check ``data_dir`` for writing and create it (``0700``; its parents with the usual
    mode) when missing; an existing directory keeps its mode."""
    check_data_dir(data_dir, writing=True)
    try:
        data_dir.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"--data-dir {data_dir}: cannot create the directory ({_why(error)}): {_ANOTHER}"
        ) from None
    check_data_dir(data_dir, writing=True)


@attrs.frozen(kw_only=True)
class State:
    """Everything the command keeps, all in ``data_dir / DATABASE``."""

    data_dir: Path
    kv: SqliteStore
    sessions: SessionStore
    durable: SqliteDurable
    """The durable runs: their engine and journal."""
    runs: SqliteRunStore

    @property
    def engine(self) -> SqliteEngine:
        """The durable runs' engine (``durable.engine``)."""
        return self.durable.engine

    @property
    def database(self) -> Path:
        return self.data_dir / DATABASE

    @property
    def notes(self) -> Path:
        return self.data_dir / "notes.txt"


@asynccontextmanager
async def open_state(data_dir: Path, *, create: bool = True) -> AsyncIterator[State]:
    """Open the stores in ``data_dir``; they close on exit.

    With ``create`` the directory and the database are created when missing; without it
    the database must exist (see :func:`check_data_dir`). The file is opened, and
    checked, before this yields: a file that is not a database raises DatabaseFileError,
    one SQLite cannot open UsageError.
    """
    import sqlite3

    from ..durable import SqliteDurable
    from ..kvstore import SqliteStore
    from ..runstore import SqliteRunStore
    from ..sessions import create_session_store

    if create:
        await trio.to_thread.run_sync(make_data_dir, data_dir)
    path = data_dir / DATABASE
    async with AsyncExitStack() as stack:
        kv = await stack.enter_async_context(SqliteStore(path))
        try:
            await kv.get("operative.cli")  # opens (and checks) the file now
        except sqlite3.Error as error:
            if no_room(error) is not None:
                raise  # the command says the disk is full, and what to do
            raise UsageError(
                f"cannot open the database {path} (SQLite: {error}): {_ANOTHER}"
            ) from None
        durable = await stack.enter_async_context(SqliteDurable(path))
        runs = await stack.enter_async_context(SqliteRunStore(durable))
        yield State(
            data_dir=data_dir,
            kv=kv,
            sessions=create_session_store(kv),
            durable=durable,
            runs=runs,
        )
