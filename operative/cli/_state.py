"""The command's state directory: one SQLite file for sessions, durable runs and the run store."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import attrs
import trio

from ..durable import SqliteCheckpointStore, SqliteEngine
from ..sessions import SessionStore, create_session_store
from ..storage import SqliteStore
from ..store import SqliteRunStore

__all__ = ["DATABASE", "State", "default_data_dir", "open_state"]

DATABASE = "operative.db"


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$OPERATIVE_DATA_DIR``, else ``$XDG_DATA_HOME/operative``, else
    ``~/.local/share/operative``."""
    if env.get("OPERATIVE_DATA_DIR"):
        return Path(env["OPERATIVE_DATA_DIR"])
    base = env.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "operative"


@attrs.frozen(kw_only=True)
class State:
    """Everything the command keeps, all in ``data_dir / DATABASE``."""

    data_dir: Path
    kv: SqliteStore
    sessions: SessionStore
    engine: SqliteEngine
    journal: SqliteCheckpointStore
    runs: SqliteRunStore

    @property
    def database(self) -> Path:
        return self.data_dir / DATABASE

    @property
    def notes(self) -> Path:
        return self.data_dir / "notes.txt"


@asynccontextmanager
async def open_state(data_dir: Path) -> AsyncIterator[State]:
    """Open (creating when new) the stores in ``data_dir``; they close on exit."""
    await trio.to_thread.run_sync(lambda: data_dir.mkdir(parents=True, exist_ok=True))
    path = data_dir / DATABASE
    async with AsyncExitStack() as stack:
        kv = await stack.enter_async_context(SqliteStore(path))
        engine = await stack.enter_async_context(SqliteEngine(path))
        journal = await stack.enter_async_context(SqliteCheckpointStore(path))
        runs = await stack.enter_async_context(SqliteRunStore(path))
        yield State(
            data_dir=data_dir,
            kv=kv,
            sessions=create_session_store(kv),
            engine=engine,
            journal=journal,
            runs=runs,
        )
