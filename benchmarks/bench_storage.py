"""Measure the conditional text-value stores: memory, SQLite and PostgreSQL.

For each backend it prints:
- **conditional writes/s**: one task doing compare-and-swap on one key in a loop (each
  write names the version it read last), and one task creating fresh keys with
  ``expected_version=None`` (put-if-absent), each a one-operation ``conditional_batch``;
- **reads/s**: ``get`` of one existing key from one task, and from 8 concurrent tasks;
- **session-style update under contention**: 8 tasks incrementing one counter key by
  read-modify-write (``get`` then a conditional put), retrying on ``ConflictError``:
  successful updates/s and conflicts per update.

SQLite uses a file in a temporary directory (WAL, ``synchronous=NORMAL``). PostgreSQL
uses ``--dsn`` (or ``OPERATIVE_POSTGRES_DSN``); without one it starts a throwaway cluster
(``initdb`` + ``pg_ctl`` from ``/usr/lib/postgresql/*/bin``, 127.0.0.1, ``fsync=off`` like
the tests, so its figures are an upper bound for a durable server), and skips PostgreSQL
if it cannot. Target: SQLite >= 5,000 conditional writes/s.

Run: ``python benchmarks/bench_storage.py`` (``--quick`` for a smoke run,
``--json PATH`` to save the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trio
from _common import machine, print_table, write_json

from operative.kvstore import (
    ConditionalTextValueStore,
    ConflictError,
    MemoryStore,
    PostgresStore,
    Put,
    SqliteStore,
)


async def cas_writes(store: ConditionalTextValueStore, n: int) -> float:
    """Compare-and-swap writes/s on one key."""
    (version,) = await store.conditional_batch([Put(key="cas", value="0")])
    started = time.perf_counter()
    for i in range(n):
        (version,) = await store.conditional_batch(
            [Put(key="cas", value=str(i), expected_version=version)]
        )
    return n / (time.perf_counter() - started)


async def create_writes(store: ConditionalTextValueStore, n: int) -> float:
    """Put-if-absent writes/s on fresh keys."""
    started = time.perf_counter()
    for i in range(n):
        await store.conditional_batch([Put(key=f"new/{i:08}", value="v", expected_version=None)])
    return n / (time.perf_counter() - started)


async def reads(store: ConditionalTextValueStore, n: int, tasks: int) -> float:
    """``get``/s of one existing key from ``tasks`` concurrent tasks."""
    await store.conditional_batch([Put(key="read", value="x" * 200)])
    each = max(1, n // tasks)

    async def reader() -> None:
        for _ in range(each):
            await store.get("read")

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(reader)
    return each * tasks / (time.perf_counter() - started)


async def contended_updates(
    store: ConditionalTextValueStore, n: int, writers: int
) -> tuple[float, float]:
    """Read-modify-write on one key by ``writers`` tasks: (updates/s, conflicts/update)."""
    conflicts = 0
    each = max(1, n // writers)

    async def writer() -> None:
        nonlocal conflicts
        done = 0
        while done < each:
            current = await store.get("session")
            value = "1" if current is None else str(int(current.value) + 1)
            expected = None if current is None else current.version
            try:
                await store.conditional_batch(
                    [Put(key="session", value=value, expected_version=expected)]
                )
            except ConflictError:
                conflicts += 1
                continue
            done += 1

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(writers):
            nursery.start_soon(writer)
    elapsed = time.perf_counter() - started
    final = await store.get("session")
    assert final is not None
    assert int(final.value) == each * writers, "lost an update"
    return each * writers / elapsed, conflicts / (each * writers)


async def measure(store: ConditionalTextValueStore, n: int) -> dict[str, float]:
    async with store:
        await store.get("warm-up")
        cas = await cas_writes(store, n)
        create = await create_writes(store, n)
        read_one = await reads(store, n, 1)
        read_many = await reads(store, n, 8)
        updates, conflicts = await contended_updates(store, n // 2, 8)
    return {
        "cas_writes_per_s": cas,
        "create_writes_per_s": create,
        "reads_per_s": read_one,
        "reads_8_tasks_per_s": read_many,
        "contended_updates_per_s": updates,
        "conflicts_per_update": conflicts,
    }


@contextlib.contextmanager
def throwaway_postgres(
    name: str = "operative-bench-pg-", mark: Callable[[Path], None] | None = None
) -> Iterator[str | None]:
    """A DSN of a temporary cluster, or None when one cannot be started.

    ``name``: the prefix of its directory under the temporary directory; ``mark``, when
    given, is called with that directory as soon as it exists (``bench_durable.py``
    writes its owner there, so a later run can clean up after a killed one).
    """
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = shutil.which("initdb") or (found[-1] if found else None)
    if initdb is None:
        yield None
        return
    bin_dir = Path(initdb).parent
    prefix: list[str] = []
    directory = Path(tempfile.mkdtemp(prefix=name))
    if mark is not None:
        mark(directory)
    directory.chmod(0o755)
    data = directory / "data"
    data.mkdir()
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            entry = pwd.getpwnam("nobody")
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        os.chown(data, entry.pw_uid, entry.pw_gid)
        prefix = ["runuser", "-u", entry.pw_name, "--"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=60)

    started = False
    try:
        run(initdb, "-D", str(data), "-A", "trust", "-U", "operative", "--no-sync")
        options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(directory / "log"), "-o",
            options, "-w", "start")  # fmt: skip
        started = True
        yield f"host=127.0.0.1 port={port} user=operative dbname=postgres"
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"could not start a PostgreSQL cluster: {exc}", file=sys.stderr)
        yield None
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (~5 s)")
    parser.add_argument("--dsn", default=os.environ.get("OPERATIVE_POSTGRES_DSN"))
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    n = 300 if args.quick else 5000

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        dsn = args.dsn
        try:
            import psycopg  # noqa: F401
        except ImportError:
            print("psycopg missing: pip install 'operative[postgres]'", file=sys.stderr)
            dsn = ""
        if dsn is None:
            dsn = stack.enter_context(throwaway_postgres())
        factories: dict[str, Callable[[], ConditionalTextValueStore]] = {
            "memory": MemoryStore,
            "sqlite": lambda: SqliteStore(os.path.join(tmp, "bench.db")),
        }
        if dsn:
            table = f"bench_{os.getpid()}"
            factories["postgres"] = lambda: PostgresStore(dsn, table=table)
        for name, factory in factories.items():
            results[name] = trio.run(measure, factory(), n)

    def k(value: float) -> str:
        return f"{value:,.0f}"

    print_table(
        f"conditional text-value stores ({n} operations per figure)",
        [
            "backend",
            "CAS writes/s",
            "creates/s",
            "reads/s",
            "reads/s (8 tasks)",
            "updates/s (8 writers, 1 key)",
            "conflicts/update",
        ],
        [
            [
                name,
                k(r["cas_writes_per_s"]),
                k(r["create_writes_per_s"]),
                k(r["reads_per_s"]),
                k(r["reads_8_tasks_per_s"]),
                k(r["contended_updates_per_s"]),
                f"{r['conflicts_per_update']:.2f}",
            ]
            for name, r in results.items()
        ],
    )
    facts: dict[str, Any] = machine()
    print(f"\n{facts['cpu']}, {facts['cores']} cores, Python {facts['python']}")
    if "sqlite" in results:
        cas = results["sqlite"]["cas_writes_per_s"]
        print(f"SQLite conditional writes/s: {cas:,.0f} (target >= 5,000)")
    if args.json:
        write_json(args.json, {"machine": facts, "n": n, "results": results})


if __name__ == "__main__":
    main()
