"""bench_durable.py cleans up the PostgreSQL clusters of benchmarks that were killed.

``sweep_clusters`` deletes a ``operative-bench-durable-pg-*`` directory only when the
benchmark process its ``owner`` file names is gone (the pid is free, or reused by a
process that started at another time), or when it has no owner file and is old; it
never stops a server it cannot prove serves that very directory.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="process start times come from /proc"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_durable", BENCHMARKS / "bench_durable.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def _cluster(bench: ModuleType, tmp: Path, name: str, owner: str | None) -> Path:
    directory = tmp / f"{bench.CLUSTER_PREFIX}{name}"
    (directory / "data").mkdir(parents=True)
    if owner is not None:
        (directory / bench.OWNER).write_text(owner + "\n")
    return directory


def test_only_the_clusters_of_gone_benchmarks_are_deleted(
    bench: ModuleType, tmp_path: Path
) -> None:
    me = os.getpid()
    started = bench._started_at(me)
    assert started is not None
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    gone = int(done.stdout)
    alive = _cluster(bench, tmp_path, "alive", f"{me} {started}")
    dead = _cluster(bench, tmp_path, "dead", f"{gone} 12345")
    reused = _cluster(bench, tmp_path, "reused", f"{me} {int(started) + 1}")
    fresh = _cluster(bench, tmp_path, "fresh", None)
    abandoned = _cluster(bench, tmp_path, "abandoned", None)
    old = time.time() - 2 * bench.UNCLAIMED_AFTER
    os.utime(abandoned, (old, old))
    other = tmp_path / "operative-pg-someone-elses"
    (other / "data").mkdir(parents=True)
    (other / bench.OWNER).write_text(f"{gone} 12345\n")
    # A stale postmaster.pid naming a live process that is no postgres of this
    # directory (this test's own process): nothing may be signalled.
    (dead / "data" / "postmaster.pid").write_text(f"{me}\n{dead / 'data'}\n")

    swept = bench.sweep_clusters(str(tmp_path))

    assert sorted(p.name for p in swept) == sorted(p.name for p in (dead, reused, abandoned))
    assert alive.exists()
    assert fresh.exists()
    assert other.exists()
    for directory in (dead, reused, abandoned):
        assert not directory.exists()
