"""A corrupt row met by a read must not leave its pooled connection on an old snapshot."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from operative.errors import CorruptRecordError
from operative.kvstore import Put, SqliteStore


async def test_a_read_that_meets_a_corrupt_row_ends_its_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    async with SqliteStore(path, max_connections=1) as store:
        await store.conditional_batch([Put(key="a", value="1"), Put(key="c", value="old")])
        with sqlite3.connect(path) as raw:
            raw.execute("INSERT INTO operative_kv VALUES ('b', CAST(X'ff' AS TEXT), 1)")
        with pytest.raises(CorruptRecordError):
            await store.list()
        with sqlite3.connect(path) as raw:  # another process writes meanwhile
            raw.execute("UPDATE operative_kv SET value = 'new', version = 2 WHERE key = 'c'")
        current = await store.get("c")
    assert current is not None
    assert (current.value, current.version) == ("new", 2)
