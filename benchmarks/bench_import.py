"""Measure what importing operative costs a fresh interpreter, next to trio and bare Python.

Prints four tables, each figure the best of N fresh interpreters, the candidates run in
interleaved rounds (one of each per round) so a slow spell on a shared machine hits
them all alike:

- ``-X importtime``: the cumulative import time of the top-level module as the
  interpreter itself reports it, for ``operative``, ``trio``, ``operative.testing`` and
  ``operative.ui``; the ratio to ``trio`` (target for ``operative``: ≤ 1.3x).
- CPU time (user + system) of the import statement alone, measured inside the fresh
  interpreter: less disturbed by other processes than the wall-clock figures;
- wall time of the whole process: ``python -c "pass"`` (the baseline), ``python -c
  "import trio"``, ``python -c "import operative"``, the same for ``operative.testing``
  and ``operative.ui``, and the command line's start-up (``python -m operative
  --help``); with the import's share (wall minus the baseline) and its ratio to trio's;
  and the CPU time of the same processes.

It also lists which heavy optional dependencies ``import operative`` pulls in (none of
``httpx``, ``anthropic``, ``openai``, ``cattrs``, ``sqlite3``, ``jsonschema`` should be there).

``--instructions`` adds a fifth table: the instructions each command executes, counted by
valgrind (``cachegrind``), once each. On a shared machine it is the one figure that does
not move from run to run (within about 0.1%), so compare changes by it.

Run: ``python benchmarks/bench_import.py [--rounds 7] [--quick] [--instructions] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, median, print_table, write_json

IMPORTTIME_MODULES = ("operative", "trio", "operative.testing", "operative.ui")

WALL_COMMANDS: dict[str, list[str]] = {
    "python (baseline)": ["-c", "pass"],
    "import trio": ["-c", "import trio"],
    "import operative": ["-c", "import operative"],
    "import operative.testing": ["-c", "import operative.testing"],
    "import operative.ui": ["-c", "import operative.ui"],
    "operative --help": ["-m", "operative", "--help"],
}

OPTIONAL = (
    "httpx",
    "anthropic",
    "openai",
    "cattrs",
    "sqlite3",
    "jsonschema",
    "opentelemetry",
    "importlib.metadata",
    "operative.durable",
    "operative.providers",
    "operative.instrumentation",
)

_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)")


def _env() -> dict[str, str]:
    # Bytecode caches on, as for an installed package: without them every figure would
    # include compiling operative's sources.
    env = dict(os.environ)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def importtime_ms(module: str) -> float:
    """The cumulative ``-X importtime`` figure of ``module`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    top = module.split(".")[0]
    cumulative = 0
    for line in done.stderr.splitlines():
        match = _LINE.match(line)
        # The package and its parents are reported after their children; sum the
        # top-level entries that the import statement caused (``operative`` and, for a
        # submodule imported after its package, the submodule itself).
        if match and match.group(3) in (top, module):
            cumulative += int(match.group(2))
    return cumulative / 1000


def cpu_ms(module: str) -> float:
    """CPU time (user + system) of ``import module`` in a fresh interpreter.

    Less disturbed than wall time by other processes on a shared machine.
    """
    code = (
        "import time\n"
        "start = time.process_time()\n"
        f"import {module}\n"
        "print((time.process_time() - start) * 1000)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env()
    )
    return float(done.stdout)


def wall_ms(args: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of a whole fresh process, in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], capture_output=True, check=True, env=_env())
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return wall, cpu


def instructions(args: list[str]) -> int | None:
    """Instructions a fresh process executes (valgrind's ``I refs``), or None without valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    done = subprocess.run(
        [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    return int(match.group(1).replace(",", "")) if match else None


def loaded_optional() -> list[str]:
    code = f"import sys, operative\nprint(' '.join(m for m in {OPTIONAL!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env()
    )
    return done.stdout.split()


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="fresh interpreters per figure")
    parser.add_argument("--quick", action="store_true", help="3 rounds, for a smoke run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions with valgrind"
    )
    options = parser.parse_args()
    rounds = 3 if options.quick else options.rounds

    for module in IMPORTTIME_MODULES:  # warm the OS file cache and the bytecode caches
        importtime_ms(module)

    importtimes: dict[str, list[float]] = {m: [] for m in IMPORTTIME_MODULES}
    cpus: dict[str, list[float]] = {m: [] for m in IMPORTTIME_MODULES}
    walls: dict[str, list[float]] = {name: [] for name in WALL_COMMANDS}
    wall_cpus: dict[str, list[float]] = {name: [] for name in WALL_COMMANDS}
    for _ in range(rounds):
        for module in IMPORTTIME_MODULES:
            importtimes[module].append(importtime_ms(module))
            cpus[module].append(cpu_ms(module))
        for name, args in WALL_COMMANDS.items():
            wall, cpu = wall_ms(args)
            walls[name].append(wall)
            wall_cpus[name].append(cpu)

    trio_best = min(importtimes["trio"])
    print_table(
        f"-X importtime, cumulative ms (best of {rounds} fresh interpreters, interleaved)",
        ["module", "best", "median", "range", "x trio (best)"],
        [
            (m, f"{min(v):.1f}", f"{median(v):.1f}", _spread(v), f"{min(v) / trio_best:.2f}")
            for m, v in importtimes.items()
        ],
    )

    cpu_trio = min(cpus["trio"])
    print_table(
        f"CPU time of the import statement, ms (best of {rounds}, interleaved)",
        ["module", "best", "median", "range", "x trio (best)"],
        [
            (m, f"{min(v):.1f}", f"{median(v):.1f}", _spread(v), f"{min(v) / cpu_trio:.2f}")
            for m, v in cpus.items()
        ],
    )

    baseline = min(walls["python (baseline)"])
    trio_share = min(walls["import trio"]) - baseline
    rows = []
    for name, values in walls.items():
        share = min(values) - baseline
        ratio = "" if name == "python (baseline)" else f"{share / trio_share:.2f}"
        rows.append(
            (
                name,
                f"{min(values):.1f}",
                f"{median(values):.1f}",
                _spread(values),
                f"{share:.1f}",
                ratio,
            )
        )
    print_table(
        f"wall time of the process, ms (best of {rounds}, interleaved)",
        ["command", "best", "median", "range", "minus baseline", "x trio"],
        rows,
    )
    cpu_baseline = min(wall_cpus["python (baseline)"])
    cpu_trio_share = min(wall_cpus["import trio"]) - cpu_baseline
    print_table(
        f"CPU time of the process, ms (best of {rounds}, the same processes)",
        ["command", "best", "median", "minus baseline", "x trio"],
        [
            (
                name,
                f"{min(v):.1f}",
                f"{median(v):.1f}",
                f"{min(v) - cpu_baseline:.1f}",
                ""
                if name == "python (baseline)"
                else f"{(min(v) - cpu_baseline) / cpu_trio_share:.2f}",
            )
            for name, v in wall_cpus.items()
        ],
    )

    counts: dict[str, int | None] = {}
    if options.instructions:
        counts = {name: instructions(args) for name, args in WALL_COMMANDS.items()}
        base_count = counts["python (baseline)"]
        trio_count = counts["import trio"]
        if base_count is None or trio_count is None:
            print("\n--instructions: valgrind is not installed")
        else:
            print_table(
                "instructions executed (valgrind), millions",
                ["command", "total", "minus baseline", "x trio"],
                [
                    (
                        name,
                        f"{(count or 0) / 1e6:.1f}",
                        f"{((count or 0) - base_count) / 1e6:.1f}",
                        ""
                        if name == "python (baseline)"
                        else f"{((count or 0) - base_count) / (trio_count - base_count):.3f}",
                    )
                    for name, count in counts.items()
                ],
            )

    optional = loaded_optional()
    print(f"\noptional modules loaded by `import operative`: {', '.join(optional) or 'none'}")

    if options.json:
        result: dict[str, Any] = {
            "machine": machine(),
            "rounds": rounds,
            "importtime_ms": importtimes,
            "import_cpu_ms": cpus,
            "wall_ms": walls,
            "process_cpu_ms": wall_cpus,
            "operative_vs_trio_importtime": min(importtimes["operative"]) / trio_best,
            "operative_vs_trio_import_cpu": min(cpus["operative"]) / cpu_trio,
            "optional_loaded": optional,
            "instructions": counts,
            # The report's shape (benchmarks/report.py): the import statement's CPU time,
            # its spread over rounds, and the per-round ratio to `import trio` (the floor).
            "attempts": rounds,
            "floor": {"statement": "import trio", "ms": spread(cpus["trio"])},
            "operative": {
                "statement": "import operative",
                "ms": spread(cpus["operative"]),
                "x_floor": spread(
                    [o / t for o, t in zip(cpus["operative"], cpus["trio"], strict=True)]
                ),
            },
        }
        write_json(options.json, result)


def spread(values: list[float]) -> dict[str, float | int]:
    """``{median, min, max, rounds}`` of per-round figures."""
    return {"median": median(values), "min": min(values), "max": max(values), "rounds": len(values)}


if __name__ == "__main__":
    main()
