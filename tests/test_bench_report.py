# ruff: noqa: RUF001, RUF003  (the report renders typographic signs and dashes)
"""benchmarks/report.py renders the performance report from the benchmarks' JSON, and
docs/comparison.md's ``<!-- bench:NAME -->`` markers are well formed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", BENCHMARKS / "report.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


report = _load()


def _spread(median: float, low: float, high: float, rounds: int = 5) -> dict[str, Any]:
    return {"median": median, "min": low, "max": high, "rounds": rounds}


def _sample() -> dict[str, dict[str, Any]]:
    """The JSON of one bench run, in the shapes report.py's docstring documents."""
    machine = {"cpu": "Test CPU", "cores": 2, "python": "3.11.7", "trio": "0.35.0"}
    loop = {
        "machine": machine,
        "quick": False,
        "per_step": {
            "floor": {"us_per_step": 12.0, "us_run_fixed": 8.0},
            "operative": {"us_per_step": 30.0, "us_run_fixed": 160.0},
        },
        "concurrency": {
            "floor": {"wall_s": 0.5, "runs": 2000, "kib_per_run_rss": 6.0},
            "operative": {"wall_s": 1.0, "runs": 2000, "kib_per_run_rss": 17.0},
        },
    }
    durable = {
        "machine": machine,
        "per_step": {
            "memory": {"us_per_step": 30.0},
            "sqlite": {"overhead_us_per_step": 120.0, "commits_per_step": 4.0},
            "postgres": {"overhead_us_per_step": _spread(700.0, 650.0, 900.0)},
            "postgres, idempotent tool": {
                "overhead_us_per_step": 450.0,
                "commits_per_step": 1.05,
                "commits_per_step_marginal": 1.0,
                "floor_overhead_us_per_step": 360.0,
                "x_floor": 1.25,
            },
        },
        "concurrency": {
            "sqlite": {
                "1": {"steps_per_s": 900.0},
                "100": {"steps_per_s": _spread(2500, 2400, 2600)},
            },
            "postgres": {"1": {"steps_per_s": 300.0}},
        },
        "notes": ["PostgreSQL is a throwaway local cluster"],
    }
    peer_import = {
        "attempts": 7,
        "floor": {"statement": "import trio", "best_ms": 100.0, "ms": _spread(110, 100, 130, 7)},
        "operative": {
            "statement": "import operative",
            "best_ms": 120.0,
            "ms": _spread(125, 120, 150, 7),
            "x_floor": _spread(1.21, 1.1, 1.4, 7),
        },
    }
    per_system = {
        "floor": (12.0, 8.0, _spread(1.0, 1.0, 1.0, 10), _spread(1.0, 1.0, 1.0, 10)),
        "operative": (29.0, 150.0, _spread(2.44, 2.1, 2.7, 10), _spread(18.0, 15.0, 21.0, 10)),
    }
    peers = {
        "machine": machine,
        "date": "2026-12-01 10:00 UTC",
        "quick": False,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [1.5, 1.0, 1.0],
        "systems": ["floor", "operative"],
        "batch_sizes": [2000, 10000],
        "per_step": {
            s: {
                "rounds": 10,
                "repetitions": 100,
                "us_per_step": step,
                "us_run_1_step": one,
                "us_per_step_marginal": step,
                "us_per_step_rounds": _spread(step, step * 0.9, step * 1.2, 10),
                "us_run_1_step_rounds": _spread(one, one * 0.9, one * 1.2, 10),
                "x_floor_per_step": x_step,
                "x_floor_run_1_step": x_one,
            }
            for s, (step, one, x_step, x_one) in per_system.items()
        },
        "parallel": {s: {"wall_s": 0.013, "parallel": True} for s in per_system},
        "concurrency": {
            "2000": {
                "floor": {
                    "wall_s": 0.5,
                    "kib_per_run": 6.0,
                    "fresh_rounds": 3,
                    "kib_per_run_rounds": _spread(6.0, 5.8, 6.3, 3),
                    "x_floor_kib_per_run": _spread(1.0, 1.0, 1.0, 3),
                    "x_floor_wall": _spread(1.0, 1.0, 1.0, 3),
                },
                "operative": {
                    "wall_s": 0.6,
                    "kib_per_run": 7.2,
                    "fresh_rounds": 3,
                    "kib_per_run_rounds": _spread(7.2, 7.0, 8.1, 3),
                    "x_floor_kib_per_run": _spread(1.2, 1.15, 1.35, 3),
                    "x_floor_wall": _spread(1.2, 1.1, 1.3, 3),
                },
            },
            "10000": {
                "floor": {"wall_s": 4.7, "kib_per_run": 7.6, "runs": 10000},
                "operative": {"wall_s": 9.9, "kib_per_run": 18.0, "runs": 10000},
            },
        },
        "batch_rounds": {
            "runs": 2000,
            "rounds": 5,
            "steps": 5,
            **{
                s: {
                    "wall_s": _spread(w, w * 0.9, w * 1.1),
                    "cpu_s": _spread(w, w * 0.9, w * 1.1),
                    "gc_s": _spread(w / 4, w / 5, w / 3),
                    "cpu_no_gc_s": _spread(w * 0.75, w * 0.7, w * 0.8),
                    "gc_collections_per_batch": 40.0,
                    "gc_share_callbacks": _spread(0.25, 0.2, 0.3),
                    "gc_share_disabled": _spread(0.24, 0.2, 0.3),
                    "x_floor_wall": x,
                }
                for s, w, x in (
                    ("floor", 0.5, _spread(1.0, 1.0, 1.0)),
                    ("operative", 0.6, _spread(1.25, 1.2, 1.35)),
                )
            },
        },
        "virtual_memory": {
            "runs": 2000,
            "rounds": 3,
            "floor": {
                "kib_per_run_rounds": _spread(7.9, 7.8, 8.0, 3),
                "marginal_kib_per_run_rounds": _spread(7.8, 7.7, 7.9, 3),
                "x_floor_kib_per_run": _spread(1.0, 1.0, 1.0, 3),
                "x_floor_marginal": _spread(1.0, 1.0, 1.0, 3),
            },
            "operative": {
                "kib_per_run_rounds": _spread(9.9, 9.8, 10.0, 3),
                "marginal_kib_per_run_rounds": _spread(9.5, 9.4, 9.6, 3),
                "x_floor_kib_per_run": _spread(1.25, 1.24, 1.27, 3),
                "x_floor_marginal": _spread(1.21, 1.2, 1.23, 3),
            },
        },
        "memory": {
            s: {
                "runs": 500,
                "in_flight": 500,
                "bytes_per_run": total,
                "by_origin_bytes_per_run": {"trio": total / 2, "operative": total / 2},
                "gc_objects_per_run": 60.0,
                "top_types": [
                    {"type": "builtins.coroutine", "objects_per_run": 6.0, "bytes_per_run": 1400.0}
                ],
                "top_lines": [{"where": "trio/_util.py:81", "bytes_per_run": 250.0}],
            }
            for s, total in (("floor", 4000.0), ("operative", 15000.0))
        },
        "import": peer_import,
        "import_ms": {"floor": 100.0, "operative": 120.0},
        "durable": {},
        "notes": [],
    }
    return {"loop": loop, "durable": durable, "peers": peers}


def _write(directory: Path, files: dict[str, dict[str, Any]]) -> Path:
    for name, data in files.items():
        (directory / f"{name}.json").write_text(json.dumps(data))
    return directory


def _goal(summary: str, name: str) -> list[str]:
    for line in summary.splitlines():
        if line.startswith(f"| {name} |"):
            return [cell.strip() for cell in line.strip("|").split("|")]
    raise AssertionError(f"no goal row {name!r} in:\n{summary}")


def test_summary_renders_every_goal_from_sample_json(tmp_path: Path) -> None:
    results = report.Results(_write(tmp_path, _sample()))
    summary = report.summary(results)
    # µs per step: the peers' per-round ratio spread is preferred to bench_loop's plain ratio.
    row = _goal(summary, "µs per step (20-step run)")
    assert row[4] == "2.44× (2.10–2.70)"
    assert row[6] == "**not met**"
    # The same-process batch: 1.25× median, 1.35× in its worst round, target 1.3×.
    row = _goal(summary, "2,000 concurrent 5-step runs, wall time")
    assert row[4] == "1.25× (1.20–1.35)"
    assert row[6] == "met (median; not every round)"
    row = _goal(summary, "peak RSS per in-flight run")
    assert row[4] == "1.20× (1.15–1.35)"
    # The same batch in lockstep on MockClock: its own row, from scenario 9.
    row = _goal(summary, "peak RSS per in-flight run, virtual time")
    assert row[2:5] == ["7.90 (7.80–8.00) KiB", "9.90 (9.80–10.0) KiB", "1.25× (1.24–1.27)"]
    assert row[5].startswith("bench_peers.py: 2,000 runs in lockstep on MockClock")
    assert row[6] == "met"
    row = _goal(summary, "`import operative` over `import trio`")
    assert row[4] == "1.21× (1.10–1.40)"
    assert row[6] == "met (median; not every round)"
    row = _goal(summary, "durable step overhead, SQLite")
    assert row[4] == "120 µs"
    assert row[6] == "met"
    row = _goal(summary, "durable step overhead, PostgreSQL")
    assert row[4] == "700 µs (650–900 µs)"
    assert row[6] == "**not met**"
    # One commit a step (an idempotent tool): a goal row of its own, and a durable row.
    row = _goal(summary, "durable step overhead, PostgreSQL, one commit a step (idempotent tool)")
    assert row[4] == "450 µs"
    assert row[6] == "met"
    assert (
        "| operative, PostgreSQL, idempotent tool (local, `fsync=off`) | 450 | 1 commit | 360 "
        "| 1.25× | 1.25× | `bench_durable.py` |"
    ) in summary
    # The sections the issue asks for are all there, none "not measured".
    for title in ("GC share of the batch", "Memory per in-flight run", "Durable steps per"):
        assert f"## {title}" in summary
    assert "*not measured" not in summary
    assert "| floor | 0.50 (0.45–0.55) | 0.12 (0.10–0.17) | 40 | 25% (20–30%) |" in summary
    assert "| operative | 150 (135–180) | 18.0× (15.0–21.0) | 29.0 |" in summary
    assert "| floor | 8.00 (7.20–9.60) | 1× | 12.0 |" in summary
    assert "| SQLite | 900 | 2,500 (2,400–2,600) | not measured |" in summary
    assert "| **total** (tracemalloc) | **4,000** | **15,000** (3.8×) |" in summary


def test_missing_files_and_sections_render_as_not_measured_with_the_reason(
    tmp_path: Path,
) -> None:
    sample = _sample()
    del sample["peers"]["batch_rounds"]
    del sample["durable"]["concurrency"]
    results = report.Results(
        _write(tmp_path, {"peers": sample["peers"], "durable": sample["durable"]})
    )
    summary = report.summary(results)
    assert "*not measured: `peers.json` has no `batch_rounds`*" in summary
    assert "*not measured: `durable.json` has no `concurrency`*" in summary
    assert "`loop.json` was not written (bench_loop.py not run)" in summary
    # Without the same-process batch, the wall-time goal falls back to the fresh processes'
    # ratio; without those either (and no loop.json), it says why for every candidate.
    row = _goal(summary, "2,000 concurrent 5-step runs, wall time")
    assert row[4] == "1.20× (1.10–1.30)"
    assert row[5] == "bench_peers.py, fresh processes in turn"
    del sample["peers"]["concurrency"]
    _write(tmp_path, {"peers": sample["peers"]})
    row = _goal(report.summary(report.Results(tmp_path)), "2,000 concurrent 5-step runs, wall time")
    assert row[4] == "not measured"
    assert "no `batch_rounds`" in row[5]
    assert "no `concurrency`" in row[5]
    assert "`loop.json` was not written" in row[5]
    # A figure of the wrong type is reported, not rendered.
    sample["durable"]["per_step"]["sqlite"]["overhead_us_per_step"] = "fast"
    _write(tmp_path, {"durable": sample["durable"]})
    row = _goal(report.summary(report.Results(tmp_path)), "durable step overhead, SQLite")
    assert row[4] == "not measured"
    assert "not str" in row[5]


def test_a_section_of_another_shape_renders_as_not_measured(tmp_path: Path) -> None:
    """Another script's JSON may change shape; the report says so instead of stopping."""
    sample = _sample()
    sample["peers"]["memory"]["operative"] = {"bytes": 1}
    sample["peers"]["import"]["operative"] = ["not", "a", "dict"]
    results = report.Results(_write(tmp_path, sample))
    assert report.render("memory", results) == (
        "*not measured: the JSON is not in the shape this section reads "
        "(KeyError: 'by_origin_bytes_per_run')*"
    )
    assert report.render("import", results).startswith("*not measured: the JSON is not in")
    summary = report.summary(results)  # everything else still renders
    assert "## Goals" in summary
    assert "| floor | 0.50 (0.45–0.55) |" in summary


def test_goal_falls_back_to_a_plain_ratio_without_spreads(tmp_path: Path) -> None:
    sample = _sample()
    results = report.Results(_write(tmp_path, {"loop": sample["loop"]}))
    row = _goal(report.summary(results), "fixed cost of a one-step run")
    assert row[2] == "8.00 µs"
    assert row[3] == "160 µs"
    assert row[4] == "20.0×"
    assert row[5] == "bench_loop.py"


def test_durable_concurrency_reads_either_orientation(tmp_path: Path) -> None:
    sample = _sample()
    flipped: dict[str, dict[str, Any]] = {}
    for backend, levels in sample["durable"]["concurrency"].items():
        for runs, entry in levels.items():
            flipped.setdefault(runs, {})[backend] = entry
    by_backend = report.render("durable-concurrency", report.Results(_write(tmp_path, sample)))
    sample["durable"]["concurrency"] = flipped
    by_runs = report.render("durable-concurrency", report.Results(_write(tmp_path, sample)))
    assert by_backend == by_runs
    assert "| PostgreSQL | 300 | not measured | not measured |" in by_runs


def test_comparison_page_markers_are_well_formed() -> None:
    text = (ROOT / "docs" / "comparison.md").read_text()
    names = [name for name, _, _ in report.blocks(text)]
    assert set(names) <= set(report.SECTIONS)
    for needed in ("peers", "memory", "gc", "durable", "durable-concurrency"):
        assert needed in names


def test_fill_replaces_only_between_markers_and_is_stable(tmp_path: Path) -> None:
    results = report.Results(_write(tmp_path, _sample()))
    page = (ROOT / "docs" / "comparison.md").read_text()
    once = report.fill(page, results)
    assert report.fill(once, results) == once
    outside = report.MARKER.split(page)
    assert report.MARKER.split(once)[0] == outside[0]
    assert report.MARKER.split(once)[-1] == outside[-1]
    assert "| operative | 29.0 (2.44×, 2.10–2.70) | 150 (18.0×, 15.0–21.0) |" in once


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- bench:gc -->\nx\n", "never closed"),
        ("<!-- bench:gc -->\n<!-- bench:memory -->\n", "opens inside bench:gc"),
        ("<!-- bench:gc -->\n<!-- /bench:memory -->\n", "closes bench:gc"),
        ("<!-- /bench:gc -->\n", "closes nothing"),
        ("<!-- bench:nope -->\n<!-- /bench:nope -->\n", "no section named 'nope'"),
        ("<!-- bench:gc --><!-- /bench:gc -->\n<!-- bench:gc --><!-- /bench:gc -->", "twice"),
    ],
)
def test_malformed_markers_are_refused(text: str, message: str) -> None:
    with pytest.raises(report.MarkerError, match=message):
        report.blocks(text)


def test_main_writes_summary_and_fills_the_page(tmp_path: Path) -> None:
    _write(tmp_path, _sample())
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- bench:import -->\nold\n<!-- /bench:import -->\nend\n")
    assert report.main(["--results", str(tmp_path), "--docs", str(page)]) == 0
    filled = page.read_text()
    assert filled.startswith("intro\n<!-- bench:import -->\n|")
    assert "old" not in filled
    assert "| `import operative` | 125 (120–150) ms | 1.21× (1.10–1.40) |" in filled
    assert filled.endswith("<!-- /bench:import -->\nend\n")
    assert "## Goals" in (tmp_path / "summary.md").read_text()


@pytest.mark.heavy  # runs the benchmarks' quick modes: about two minutes
def test_report_renders_from_every_benchmarks_quick_json(tmp_path: Path) -> None:
    """Each script's ``--quick --json`` output, as the bench session writes it, renders
    into a summary whose goals all have a figure (PostgreSQL and Temporal aside)."""
    runs = {
        "loop": ["bench_loop.py", "--quick"],
        "durable": ["bench_durable.py", "--quick", "--no-postgres"],
        "peers": ["bench_peers.py", "--quick", "--systems", "floor", "operative", "--no-postgres"],
    }
    if (BENCHMARKS / "bench_import.py").exists():
        runs["import"] = ["bench_import.py", "--quick"]
    for name, (script, *args) in runs.items():
        done = subprocess.run(
            [
                sys.executable,
                str(BENCHMARKS / script),
                *args,
                "--json",
                str(tmp_path / f"{name}.json"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    page = tmp_path / "comparison.md"
    original = (ROOT / "docs" / "comparison.md").read_text()
    page.write_text(original)
    assert report.main(["--results", str(tmp_path), "--docs", str(page)]) == 0
    summary = (tmp_path / "summary.md").read_text()
    for goal in report.GOALS:
        row = _goal(summary, goal.name)
        if "PostgreSQL" not in goal.name:
            assert row[4] != "not measured", row
    for section in ("peers", "fixed-cost", "import", "gc", "memory", "durable"):
        assert not report.render(section, report.Results(tmp_path)).startswith("*not measured")
    filled = page.read_text()
    assert "| operative |" in filled
    assert [n for n, _, _ in report.blocks(filled)] == [n for n, _, _ in report.blocks(original)]


def test_the_import_section_gives_the_instruction_ratio_when_counted(tmp_path: Path) -> None:
    """``bench_import.py --instructions`` counts each process once; the report sets the
    import's share (net of ``python -c pass``) against trio's, and says nothing of it
    when valgrind was not there."""
    sample = _sample()
    counted = {
        "machine": {},
        "attempts": 7,
        "floor": {"statement": "import trio", "ms": {"median": 100.0, "min": 90.0, "max": 110.0}},
        "operative": {
            "statement": "import operative",
            "ms": {"median": 130.0, "min": 120.0, "max": 140.0},
            "x_floor": {"median": 1.3, "min": 1.2, "max": 1.4, "rounds": 7},
        },
        "instructions": {
            "python (baseline)": 90_000_000,
            "import trio": 510_000_000,
            "import operative": 615_000_000,
        },
    }
    text = report.render("import", report.Results(_write(tmp_path, {**sample, "import": counted})))
    assert (
        "`import operative` 525.0 M net of `python -c pass`, `import trio` 420.0 M: 1.25×"
    ) in text
    counted["instructions"] = {"python (baseline)": None, "import trio": None}
    text = report.render("import", report.Results(_write(tmp_path, {**sample, "import": counted})))
    assert "Instructions" not in text


def test_the_gc_section_gives_the_batch_counted_under_virtual_time(tmp_path: Path) -> None:
    """``bench_peers.py --instructions`` counts the batch per run with valgrind; the GC
    section adds a table of those counts and their ratios, and nothing when not counted."""
    sample = _sample()
    text = report.render("gc", report.Results(_write(tmp_path, sample)))
    assert "virtual time" not in text
    sample["peers"]["batch_instructions"] = {
        "runs": 2000,
        "steps": 5,
        "floor": {
            "instructions_per_run": 1_100_000.0,
            "d1_misses_per_run": 25_000.0,
            "ll_misses_per_run": 110.0,
            "gc_collections": 380,
            "x_floor": {"instructions": 1.0, "d1_misses": 1.0, "ll_misses": 1.0},
        },
        "operative": {
            "instructions_per_run": 1_232_000.0,
            "d1_misses_per_run": 30_000.0,
            "ll_misses_per_run": 150.0,
            "gc_collections": 420,
            "x_floor": {"instructions": 1.12, "d1_misses": 1.2, "ll_misses": 1.36},
        },
    }
    text = report.render("gc", report.Results(_write(tmp_path, sample)))
    assert "| operative | 1,232k (1.12×) | 30.0k (1.20×) | 150 (1.36×) | 420 |" in text
    assert "| floor | 1,100k (1.00×) | 25.0k (1.00×) | 110 (1.00×) | 380 |" in text


def test_the_durable_section_gives_the_ratio_per_commit(tmp_path: Path) -> None:
    """Two commits a step at 2.4 times the floor's one write is 1.2 times per commit."""
    sample = _sample()
    sample["durable"]["per_step"]["postgres"].update(
        commits_per_step=2.0,
        floor_overhead_us_per_step=_spread(450.0, 400.0, 500.0),
        x_floor=_spread(2.4, 2.2, 3.0),
    )
    text = report.render("durable", report.Results(_write(tmp_path, sample)))
    assert "| 2.40× (2.20–3.00) | 1.20× (1.10–1.50) |" in text
    assert "| 4 commits | – | – | – |" in text  # SQLite: no floor measured


def test_the_same_work_section_gives_the_lockstep_peak_and_marginal_rss(tmp_path: Path) -> None:
    """Scenario 9 measured with the same-work floor: its peak and marginal RSS per run
    join the same-work table, with the three ratios; without scenario 9, neither row."""
    sample = _sample()
    peers = sample["peers"]
    for key in ("per_step",):
        peers[key]["floor-same-work"] = {
            **peers[key]["floor"],
            "x_floor_per_step": _spread(0.8, 0.7, 0.9, 10),
            "x_floor_run_1_step": _spread(1.3, 1.2, 1.4, 10),
        }
        peers[key]["operative"]["x_same_work_per_step"] = _spread(1.5, 1.4, 1.6, 10)
        peers[key]["operative"]["x_same_work_run_1_step"] = _spread(2.2, 2.1, 2.3, 10)
    virtual = peers["virtual_memory"]
    virtual["floor-same-work"] = {
        "kib_per_run_rounds": _spread(8.8, 8.7, 8.9, 3),
        "marginal_kib_per_run_rounds": _spread(8.4, 8.3, 8.5, 3),
        "x_floor_kib_per_run": _spread(1.11, 1.1, 1.12, 3),
        "x_floor_marginal": _spread(1.08, 1.07, 1.09, 3),
    }
    virtual["operative"]["x_same_work_kib_per_run"] = _spread(1.13, 1.12, 1.14, 3)
    virtual["operative"]["x_same_work_marginal"] = _spread(1.12, 1.11, 1.13, 3)
    text = report.render("same-work", report.Results(_write(tmp_path, sample)))
    assert (
        "| 2,000 runs in lockstep (MockClock), peak RSS per run | 7.90 (7.80–8.00) KiB "
        "| 8.80 (8.70–8.90) KiB | 9.90 (9.80–10.0) KiB | 1.11× (1.10–1.12) "
        "| 1.25× (1.24–1.27) | 1.13× (1.12–1.14) |"
    ) in text
    assert (
        "| 2,000 runs in lockstep (MockClock), RSS of one more run in flight "
        "| 7.80 (7.70–7.90) KiB | 8.40 (8.30–8.50) KiB | 9.50 (9.40–9.60) KiB "
        "| 1.08× (1.07–1.09) | 1.21× (1.20–1.23) | 1.12× (1.11–1.13) |"
    ) in text
    del peers["virtual_memory"]
    text = report.render("same-work", report.Results(_write(tmp_path, sample)))
    assert "lockstep" not in text
    assert "µs per step (20-step run)" in text


def _realistic(per_step: float, wall: float, peer: float) -> dict[str, Any]:
    """A ``bench_realistic.py --json`` of the shape report.py reads."""
    ratio = {"floor": _spread(10.0, 9.0, 11.0)}
    return {
        "date": "2026-12-07 21:00 UTC",
        "steps": 20,
        "systems": ["floor", "operative", "pydantic-ai"],
        "per_step": {
            "floor": {"us_per_step_rounds": ratio["floor"]},
            "operative": {
                "us_per_step_rounds": _spread(10.0 * per_step, 9.0, 40.0),
                "x_floor_per_step": _spread(per_step, per_step - 0.1, per_step + 0.2),
            },
            "pydantic-ai": {
                "us_per_step_rounds": _spread(2000.0, 1900.0, 2100.0),
                "x_operative_per_step": _spread(peer, peer - 10, peer + 10),
            },
        },
        "batch_rounds": {
            "runs": 2000,
            "rounds": 5,
            "floor": {"wall_s": _spread(0.4, 0.38, 0.45)},
            "operative": {
                "wall_s": _spread(0.5, 0.45, 0.6),
                "x_floor_wall": _spread(wall, 1.1, 1.6),
            },
        },
        "concurrency": {
            "runs": 2000,
            "fresh_rounds": 3,
            "floor": {"kib_per_run_rounds": _spread(8.0, 7.9, 8.1, 3)},
            "operative": {
                "kib_per_run_rounds": _spread(10.0, 9.9, 10.1, 3),
                "x_floor_kib_per_run": _spread(1.25, 1.2, 1.3, 3),
            },
        },
        "lockstep": {
            "runs": 2000,
            "rounds": 3,
            "floor": {"kib_per_run_rounds": _spread(10.0, 10.0, 10.0, 3)},
            "operative": {
                "kib_per_run_rounds": _spread(12.0, 12.0, 12.0, 3),
                "x_floor_kib_per_run": _spread(1.2, 1.2, 1.2, 3),
            },
        },
    }


def test_the_realistic_section_gives_each_goal_with_the_baseline_beside_it(
    tmp_path: Path,
) -> None:
    """``realistic.json`` against the goals of one run, one path (at most 3, 1.5 and 1.5
    times the floor, each peer at least 50 times operative), ``realistic_before.json``'s
    ratios beside them; a section left out of the summary when neither was written."""
    assert "## Realistic adapter" not in report.summary(report.Results(_write(tmp_path, {})))
    files = {
        "realistic": _realistic(per_step=3.2, wall=1.45, peer=55.0),
        "realistic_before": _realistic(per_step=1.6, wall=1.3, peer=150.0),
    }
    text = report.render("realistic", report.Results(_write(tmp_path, files)))
    rows = {row.split(" | ")[0].lstrip("| "): row for row in text.splitlines()}
    per_step = rows["µs per step (20-step run) × floor"]
    assert "| 3.20× (3.10–3.40) | 1.60× (1.50–1.80) | **not met** |" in per_step
    batch = rows["2,000-run batch, wall time × floor (one process)"]
    assert batch.endswith(
        "| 1.45× (1.10–1.60) | 1.30× (1.10–1.60) | met (median; not every round) |"
    )
    peer = rows["pydantic-ai µs per step × operative's"]
    assert "pydantic-ai: 2,000 (1,900–2,100) µs" in peer
    assert peer.endswith("| 55.0× (45.0–65.0) | 150× (140–160) | met (median; not every round) |")
    assert "openai-agents µs per step × operative's" in rows  # not measured: no such peer
    assert (
        "not measured: no `per_step.openai-agents`"
        in rows["openai-agents µs per step × operative's"]
    )
    (tmp_path / "realistic.json").unlink()
    text = report.render("realistic", report.Results(tmp_path))
    assert "| ≤ 3× | – | – | not measured | 1.60× (1.50–1.80) | – |" in text
    assert "`realistic.json` was not written" in text
