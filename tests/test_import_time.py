"""``import operative`` stays light: optional machinery loads on first use, and works then.

Each check runs in a fresh interpreter, since this test process has imported most of
operative already. No timing is asserted (``benchmarks/bench_import.py`` reports it):
the tests check *what* a plain import loads, and that each deferred part loads and
works when it is first used.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NOT_LOADED_BY_IMPORT = (
    # providers and their SDKs
    "operative.providers",
    "httpx",
    "anthropic",
    "openai",
    # durable runs, storage, SQL
    "operative.durable",
    "operative.runstore",
    "operative.sessions",
    "operative._sql",
    "operative.kvstore._sqlite",
    "operative.kvstore._postgres",
    "sqlite3",
    "psycopg",
    # validation and schema machinery only failures or unusual types need
    "cattrs",
    "operative._core._convert",
    "operative._core._locate",
    "jsonschema",
    "json",
    # instrumentation, liveness extras, optional subsystems
    "opentelemetry",
    "operative.instrumentation",
    "operative.liveness._diagnostic",
    "operative.liveness._heartbeat",
    "operative.multiagent",
    "operative.budgets",
    "operative.context",
    "operative.steering",
    "operative.cli",
    "operative.testing",
    "importlib.metadata",
)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plain_import_loads_no_optional_machinery() -> None:
    """``import operative`` imports none of the modules a plain run does not need."""
    out = _run(
        f"""
        import sys
        import operative
        print(sorted(m for m in {NOT_LOADED_BY_IMPORT!r} if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    """Each name of ``operative.__all__`` resolves from a fresh ``import operative``."""
    out = _run(
        """
        import operative
        missing = [n for n in operative.__all__ if getattr(operative, n, None) is None]
        print(missing)
        """
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("statement", "loads"),
    [
        ("from operative import SqliteStore", "operative.kvstore._sqlite"),
        ("from operative.kvstore import SqliteStore", "sqlite3"),
        ("from operative.kvstore import PostgresStore", "operative._sql"),
        ("operative.PostgresStore", "operative.kvstore._postgres"),
        (
            "from operative.liveness import Heartbeat, serve_heartbeat",
            "operative.liveness._heartbeat",
        ),
        ("from operative.liveness import DiagnosticRun", "operative.liveness._diagnostic"),
        ("from operative.liveness import open_diagnostic_run", "operative.liveness._diagnostic"),
    ],
)
def test_a_deferred_name_loads_on_first_use(statement: str, loads: str) -> None:
    """Naming a deferred feature loads its module, and gives the same object as a direct import."""
    out = _run(
        f"""
        import sys
        import operative
        assert {loads!r} not in sys.modules
        {statement}
        print({loads!r} in sys.modules)
        """
    )
    assert out.strip() == "True"


def test_sqlite_store_works_after_a_lazy_import(tmp_path: Path) -> None:
    """The lazily loaded SqliteStore is the real class: it stores and reads a value."""
    out = _run(
        f"""
        import trio
        import operative
        from operative.kvstore import Put, SqliteStore
        from operative.kvstore._sqlite import SqliteStore as Direct

        assert operative.SqliteStore is SqliteStore is Direct

        async def main():
            async with SqliteStore({str(tmp_path)!r} + "/kv.db") as store:
                await store.conditional_batch([Put(key="k", value="v")])
                print((await store.get("k")).value)

        trio.run(main)
        """
    )
    assert out.strip() == "v"


def test_validation_failure_locates_the_path_after_a_lazy_load() -> None:
    """The failure walk (``_locate``) loads on the first failure and names the path."""
    out = _run(
        """
        import sys
        import msgspec
        import operative
        from operative._core._errors import CorruptRecordError

        class Inner(msgspec.Struct):
            n: int

        class Outer(msgspec.Struct):
            items: list[Inner]

        assert operative.decode(b'{"items": [{"n": 1}]}', Outer) == Outer([Inner(1)])
        assert "operative._core._locate" not in sys.modules
        try:
            operative.decode(b'{"items": [{"n": 1}, {"n": "x"}]}', Outer, what="a record")
        except CorruptRecordError as exc:
            print(exc)
            print("operative._core._locate" in sys.modules)
        """
    )
    assert "$.items[1].n" in out
    assert out.split()[-1] == "True"


def test_unknown_attribute_still_raises() -> None:
    """A name that is not exported is an AttributeError, lazily loaded packages included."""
    out = _run(
        """
        import operative, operative.kvstore, operative.liveness
        for module in (operative, operative.kvstore, operative.liveness):
            try:
                getattr(module, "NoSuchName")
            except AttributeError as exc:
                print("NoSuchName" in str(exc))
        """
    )
    assert out.split() == ["True", "True", "True"]


@pytest.mark.heavy
def test_import_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    """``benchmarks/bench_import.py --quick --json`` runs and records every figure."""
    import json

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "import.json"
    done = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / "bench_import.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert "-X importtime" in done.stdout
    figures = json.loads(out.read_text())
    assert set(figures["importtime_ms"]) == {
        "operative",
        "trio",
        "operative.testing",
        "operative.ui",
    }
    assert all(len(v) == 3 and min(v) > 0 for v in figures["importtime_ms"].values())
    assert "operative --help" in figures["wall_ms"]
    assert figures["operative_vs_trio_importtime"] > 0
    assert "sqlite3" not in figures["optional_loaded"]


def test_cli_help_loads_no_command_dependencies() -> None:
    """``operative --help`` builds the parser without the stores, providers or servers."""
    out = _run(
        """
        import contextlib, io, sys
        from operative.cli import main

        with contextlib.redirect_stdout(io.StringIO()) as text:
            code = main(["--help"], env={})
        heavy = ("operative.durable", "operative.providers", "operative.runstore",
                 "operative.sessions", "operative.budgets", "operative.cli._running",
                 "operative.cli._inspect", "operative.cli._serve", "sqlite3", "httpx")
        print(code, "usage:" in text.getvalue(), sorted(m for m in heavy if m in sys.modules))
        """
    )
    assert out.strip() == "0 True []"


def test_ui_import_does_not_build_the_command_line() -> None:
    """``import operative.ui`` uses the chat host without loading the CLI's parser."""
    out = _run(
        """
        import sys
        import operative.ui
        print(sorted(m for m in ("operative.cli._main", "argparse") if m in sys.modules))
        from operative.cli import main
        print(callable(main), "operative.cli._main" in sys.modules)
        """
    )
    assert out.split("\n")[:2] == ["[]", "True True"]
