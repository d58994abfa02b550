# ruff: noqa: RUF001, RUF002  (the report writes typographic signs and dashes on purpose)
"""The performance report: ``benchmarks/results/summary.md`` and the figures of
``docs/comparison.md``, both rendered from the JSON one ``nox -s bench`` run writes.

Nothing here measures anything. It reads ``RESULTS/<name>.json`` for each name below
(a missing file or section renders as "not measured" with the reason), writes the
goals table and the detail tables to ``RESULTS/summary.md``, and replaces the text
between each ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` pair of marker
comments in ``docs/comparison.md`` (prose outside the markers is left alone).

Figures: a figure is either a plain number or a spread ``{"median": m, "min": a, "max":
b, "rounds": n}`` (``"n"`` is read as well as ``"rounds"``; ``_common.spread`` builds
them). Ratios ``x_floor...`` are per-round ratios to the floor measured in the same
process, summarised as a spread. The keys read, by file (``?`` marks an optional key):

``loop.json`` (``bench_loop.py --json``)
    ``per_step.{floor,operative}.us_per_step``, ``.us_run_fixed``,
    ``per_step.operative.x_floor_per_step?``, ``.x_floor_run_1_step?`` (spreads);
    ``concurrency.{floor,operative}.wall_s``, ``.runs``, ``.kib_per_run_rss``,
    ``concurrency.operative.x_floor_wall?``, ``.x_floor_kib_per_run?`` (spreads).
``durable.json`` (``bench_durable.py --json``)
    ``per_step.memory.us_per_step``; ``per_step.{sqlite,postgres}.overhead_us_per_step``,
    ``.commits_per_step``, ``.overhead_us_per_commit?``, ``.overhead_us_per_step_spread?``
    (per-round medians), ``.floor_overhead_us_per_step?`` (spread: a hand-written Trio
    loop's overhead for one INSERT per step on that backend), ``.x_floor?`` (spread of
    per-round ratios to it);
    ``concurrency.{sqlite,postgres}.{"1","100","1000"}.steps_per_s`` (a figure; also
    ``.wall_s?``, ``.runs?``, ``.steps?``); the orientation ``concurrency.<runs>.<backend>``
    is read too; ``notes?`` (list of strings).
``import.json`` (``bench_import.py --json``)
    the shape of ``peers.json``'s ``import``: ``{floor,operative}.ms`` (a figure; the
    floor is ``import trio``), ``operative.x_floor`` (spread of per-round ratios),
    ``{floor,operative}.statement?``, ``{floor,operative}.best_ms?``, ``attempts?``.
``peers.json`` (``bench_peers.py --json``)
    ``systems``; ``per_step.<system>.us_per_step``, ``.us_run_1_step``,
    ``.x_floor_per_step``, ``.x_floor_run_1_step``, ``.us_per_step_rounds``,
    ``.us_run_1_step_rounds``; ``parallel.<system>.wall_s``, ``.parallel``;
    ``batch_sizes``; ``concurrency.<runs>.<system>`` (``wall_s``, ``kib_per_run``,
    ``stopped_after_s``, ``finished``, ``not_run_after``, ``x_floor_wall?``,
    ``x_floor_kib_per_run?``, ``fresh_rounds?``, ``wall_s_rounds?``,
    ``kib_per_run_rounds?``); ``batch_rounds.{runs, rounds}`` and
    ``batch_rounds.<system>.{wall_s, cpu_s, gc_s, gc_share_callbacks, gc_share_disabled,
    gc_collections_per_batch, x_floor_wall}``; ``batch_instructions?.{runs, steps}`` and
    ``batch_instructions.<system>.{instructions_per_run, d1_misses_per_run,
    ll_misses_per_run, gc_collections, x_floor.{instructions, d1_misses, ll_misses}}``;
    ``memory.<system>.{in_flight,
    bytes_per_run, by_origin_bytes_per_run, top_types[{type, objects_per_run,
    bytes_per_run}], top_lines[{where, bytes_per_run}]}``; ``import`` (as ``import.json``);
    ``durable.operative.per_step.<memory|sqlite|postgres>``,
    ``durable.langgraph.per_step.<none|memory|sqlite>``; ``machine``, ``date``, ``quick``,
    ``load_before``, ``load_after``, ``notes``.
``temporal.json`` (``bench_temporal.py --json``)
    ``per_step.<sqlite|postgres|temporal>.overhead_us_per_step`` (spreads).
``realistic.json`` (``bench_realistic.py --json``), and ``realistic_before.json?`` (the
baseline run of the same script, kept for the "before" column)
    ``steps``, ``systems``; ``per_step.<system>.us_per_step_rounds`` (spread),
    ``per_step.operative.x_floor_per_step`` (spread), ``per_step.<peer>.x_operative_per_step``
    (spread of per-round ratios of the peer's time to operative's);
    ``batch_rounds.{runs, rounds}``, ``batch_rounds.<floor|operative>.wall_s`` (spread),
    ``batch_rounds.operative.x_floor_wall`` (spread);
    ``concurrency.{runs, fresh_rounds}``,
    ``concurrency.<floor|operative>.kib_per_run_rounds``,
    ``concurrency.operative.x_floor_kib_per_run``; ``lockstep.{runs, rounds}``,
    ``lockstep.<floor|operative>.kib_per_run_rounds``,
    ``lockstep.operative.x_floor_kib_per_run`` (spreads);
    ``over_prebuilt_us_per_step?.<floor|operative>``,
    ``per_step.<floor|operative>-prebuilt.us_per_step_rounds?``.
``breakdown.json`` (``bench_breakdown.py --json``)
    ``rows[{component, group, us (spread), instructions?, pays.<system>: [run, step] |
    null, note}]``; ``systems.<system>.{us_run_1_step, us_marginal_step,
    instructions_run_1_step?, instructions_marginal_step?, ledger_us_run_1_step?,
    ledger_us_marginal_step?, ledger_instructions_run_1_step?,
    ledger_instructions_marginal_step?}``; ``operative_phases.{us_run_1_step, phases_us,
    rest_us, phases_instructions?, instructions_run_1_step?, rest_instructions?}``;
    ``operative_profile.<one_step|long>.top_own_time[{function, calls_per_run, share}]``;
    ``instructions_by``, ``rounds``, ``long_steps``.

The same-work floor (``floor-same-work`` in ``peers.json``) is a second hand-written
Trio loop that does the work the design requires of a run; where ``peers.json`` has
``x_same_work_*`` ratios (``per_step.<system>.x_same_work_per_step``,
``.x_same_work_run_1_step``, ``batch_rounds.<system>.x_same_work_wall``,
``concurrency.<runs>.<system>.x_same_work_wall``, ``.x_same_work_kib_per_run``,
``import.<system>.x_same_work``), the goals table and the ``same-work`` section show
operative's ratio to it next to its ratio to the bare floor.

Every file may carry ``machine``, ``date`` and ``quick``; the report names each file's
date and says when a figure comes from a ``--quick`` smoke run.

Each goal (``GOALS``) lists where its figures can come from, in order of preference; the
report takes the first with a spread over rounds, else the first with a figure at all:
µs per step and the one-step fixed cost from ``loop.json``'s ``x_floor_*`` spreads, then
``peers.json``'s; the batch wall time from ``peers.json``'s ``batch_rounds`` (one
process), then its fresh processes, then ``loop.json``; peak RSS per run from
``peers.json``'s fresh processes, then ``loop.json``; the import ratio from
``import.json``, then ``peers.json``; the durable overheads from ``durable.json``, then
``peers.json``'s ``durable``.

Usage::

    python benchmarks/report.py                                   # benchmarks/results/
    python benchmarks/report.py --results /tmp/r --summary /tmp/r/summary.md --docs -
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("loop", "durable", "import", "peers", "temporal", "breakdown", "realistic")
"""``RESULTS/<name>.json`` files the report reads, each written by ``bench_<name>.py``."""
BASELINES = {"realistic_before": "realistic"}
"""``RESULTS/<name>.json`` files kept from an earlier run of a script (the source named),
for a "before" column; not written by ``nox -s bench``."""
DURABLE_LEVELS = ("1", "100", "1000")
BACKENDS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
IDEMPOTENT = ", idempotent tool"
"""The suffix of ``bench_durable.py``'s runs whose tool is idempotent (one commit a step)."""
ONE_COMMIT = ", one commit a step (idempotent tool)"
NOT_MEASURED = "not measured"


class Missing(Exception):
    """A figure the report needs is not in the JSON; the message says which and why."""


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A median with an optional min-max spread over rounds."""

    median: float
    low: float | None = None
    high: float | None = None
    rounds: int | None = None

    @property
    def has_spread(self) -> bool:
        return self.low is not None and self.high is not None and (self.rounds or 2) > 1


def figure(value: Any) -> Figure:
    """A plain number or a ``{median, min, max, rounds|n}`` spread, as a ``Figure``."""
    if isinstance(value, bool):
        raise Missing(f"a figure, not {value!r}")
    if isinstance(value, int | float):
        return Figure(float(value))
    if isinstance(value, dict) and isinstance(value.get("median"), int | float):
        low, high = value.get("min"), value.get("max")
        rounds = value.get("rounds", value.get("n"))
        return Figure(
            float(value["median"]),
            None if low is None else float(low),
            None if high is None else float(high),
            None if rounds is None else int(rounds),
        )
    raise Missing(f"a number or a {{median, min, max}} spread, not {type(value).__name__}")


class Results:
    """The JSON files of one bench run, read defensively: ``get`` raises ``Missing``
    naming the file and the key path when a figure is absent."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data: dict[str, Any] = {}
        self.why_missing: dict[str, str] = {}
        for name in SOURCES:
            path = directory / f"{name}.json"
            try:
                self.data[name] = json.loads(path.read_text())
            except FileNotFoundError:
                self.why_missing[name] = f"`{name}.json` was not written (bench_{name}.py not run)"
            except (OSError, ValueError) as exc:
                self.why_missing[name] = f"`{name}.json` could not be read ({exc})"
        for name, source in BASELINES.items():
            path = directory / f"{name}.json"
            try:
                self.data[name] = json.loads(path.read_text())
            except FileNotFoundError:
                self.why_missing[name] = (
                    f"`{name}.json` not found (the baseline run of bench_{source}.py)"
                )
            except (OSError, ValueError) as exc:
                self.why_missing[name] = f"`{name}.json` could not be read ({exc})"

    @classmethod
    def of(cls, data: dict[str, Any]) -> Results:
        """Results already in memory (``{"peers": {...}}``): what a benchmark renders
        from the figures it has just measured; the files not given are "not written"."""
        found = cls.__new__(cls)
        found.directory = Path(".")
        found.data = dict(data)
        found.why_missing = {
            name: f"`{name}.json` was not written (bench_{name}.py not run)"
            for name in SOURCES
            if name not in data
        }
        for name, source in BASELINES.items():
            if name not in data:
                found.why_missing[name] = (
                    f"`{name}.json` not found (the baseline run of bench_{source}.py)"
                )
        return found

    def get(self, source: str, *path: str) -> Any:
        if source not in self.data:
            raise Missing(self.why_missing[source])
        node: Any = self.data[source]
        for i, key in enumerate(path):
            if not isinstance(node, dict) or key not in node:
                where = ".".join(path[: i + 1])
                raise Missing(f"`{source}.json` has no `{where}`")
            node = node[key]
        return node

    def fig(self, source: str, *path: str) -> Figure:
        try:
            return figure(self.get(source, *path))
        except Missing as exc:
            if source in self.data and "has no" not in str(exc):
                raise Missing(f"`{source}.json` `{'.'.join(path)}`: {exc}") from None
            raise

    def has(self, source: str, *path: str) -> bool:
        try:
            self.get(source, *path)
        except Missing:
            return False
        return True

    def quick(self, source: str) -> bool:
        return bool(self.data.get(source, {}).get("quick"))


# --------------------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------------------


def number(value: float, digits: int | None = None) -> str:
    """A figure with sensible digits: 1,234 / 56.7 / 0.82."""
    if digits is None:
        size = abs(value)
        digits = 0 if size >= 100 else 1 if size >= 10 else 2
    return f"{value:,.{digits}f}"


def spread_text(f: Figure, digits: int | None = None, unit: str = "") -> str:
    """``12.3 (11.0–14.1)``, or ``12.3`` without a spread; ``unit`` goes after each."""
    text = number(f.median, digits) + unit
    if f.has_spread:
        assert f.low is not None
        assert f.high is not None
        text += f" ({number(f.low, digits)}–{number(f.high, digits)}{unit})"
    return text


def ratio_text(f: Figure) -> str:
    """``2.44× (2.10–2.71)``: the median ratio and its range over rounds."""
    digits = 2 if f.median < 10 else None
    text = number(f.median, digits) + "×"
    if f.has_spread:
        assert f.low is not None
        assert f.high is not None
        text += f" ({number(f.low, digits)}–{number(f.high, digits)})"
    return text


def with_ratio(value: str, f: Figure | None, floor: bool = False) -> str:
    """``37.9 (2.44×, 2.10–2.71)``; the floor's own row says ``1×``."""
    if floor:
        return f"{value} (1×)"
    if f is None:
        return value
    text = f"{value} ({number(f.median, 2 if f.median < 10 else None)}×"
    if f.has_spread:
        assert f.low is not None
        assert f.high is not None
        digits = 2 if f.median < 10 else None
        text += f", {number(f.low, digits)}–{number(f.high, digits)}"
    return text + ")"


def plural(n: Any, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def share_text(f: Figure) -> str:
    text = f"{f.median * 100:.0f}%"
    if f.has_spread:
        assert f.low is not None
        assert f.high is not None
        text += f" ({f.low * 100:.0f}–{f.high * 100:.0f}%)"
    return text


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def attempt(render: Callable[..., str], *args: Any, fallback: str = NOT_MEASURED) -> str:
    """``render(*args)``, or ``fallback: why`` when a figure is missing (just ``fallback``
    when it is a dash: a table cell)."""
    try:
        return render(*args)
    except Missing as exc:
        return fallback if fallback == "–" else f"{fallback}: {exc}"
    except SHAPE_ERRORS as exc:
        return fallback if fallback == "–" else f"{fallback}: unexpected JSON ({_shape(exc)})"


SHAPE_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError)
"""What reading a JSON of another shape than the documented one raises in a renderer."""


def _shape(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------------------
# the goals
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One place a goal's figures can come from."""

    source: str
    label: str | Callable[[Results], str]
    ratio: Callable[[Results], Figure]
    floor: Callable[[Results], str]
    ours: Callable[[Results], str]


@dataclass(frozen=True)
class Goal:
    name: str
    target: float
    kind: str  # "ratio": ratio to the floor <= target; "us": absolute microseconds <= target
    candidates: tuple[Candidate, ...]


def _plain_ratio(
    source: str, ours: tuple[str, ...], floor: tuple[str, ...]
) -> Callable[[Results], Figure]:
    def read(r: Results) -> Figure:
        return Figure(r.fig(source, *ours).median / r.fig(source, *floor).median)

    return read


def _fig(source: str, *path: str) -> Callable[[Results], Figure]:
    return lambda r: r.fig(source, *path)


def _text(
    source: str, path: tuple[str, ...], unit: str, digits: int | None = None
) -> Callable[[Results], str]:
    return lambda r: spread_text(r.fig(source, *path), digits) + unit


def _batch_label(r: Results) -> str:
    runs = r.get("peers", "batch_rounds", "runs")
    rounds = r.get("peers", "batch_rounds", "rounds")
    return f"bench_peers.py: {runs:,} runs, floor and operative in one process, " + plural(
        rounds, "round"
    )


def _virtual_memory_label(r: Results) -> str:
    runs = r.get("peers", "virtual_memory", "runs")
    rounds = r.get("peers", "virtual_memory", "rounds")
    return (
        f"bench_peers.py: {runs:,} runs in lockstep on MockClock, fresh processes in turn, "
        + plural(rounds, "round")
    )


def _peers_first_batch(r: Results) -> str:
    sizes = r.get("peers", "batch_sizes")
    return str(min(sizes))


def _recorded(
    source: str,
    label: str | Callable[[Results], str],
    section: str,
    keys: tuple[str, str, str],
    unit: str,
) -> Candidate:
    """operative's ratio to the floor as ``source`` recorded it in ``section``, with both
    figures; ``keys``: the ratio's, the floor's figure's and operative's."""
    ratio_key, floor_key, ours_key = keys
    return Candidate(
        source,
        label,
        _fig(source, section, "operative", ratio_key),
        _text(source, (section, "floor", floor_key), unit),
        _text(source, (section, "operative", ours_key), unit),
    )


def _loop(
    section: str, ratio_key: str, floor_key: str, ours_key: str, unit: str, label: str
) -> Candidate:
    """operative's ratio to the floor as ``bench_loop.py`` recorded it, with both figures."""
    return _recorded("loop", label, section, (ratio_key, floor_key, ours_key), unit)


def _loop_recomputed(section: str, key: str, unit: str, label: str) -> Candidate:
    """The ratio of ``bench_loop.py``'s two figures (a results file without the ratio)."""
    return Candidate(
        "loop",
        label,
        _plain_ratio("loop", (section, "operative", key), (section, "floor", key)),
        _text("loop", (section, "floor", key), unit),
        _text("loop", (section, "operative", key), unit),
    )


def _peers_batch(ratio_key: str, rounds_key: str, unit: str) -> Candidate:
    """The first batch size of ``bench_peers.py``'s fresh-process batches."""

    def figure(system: str, key: str) -> Callable[[Results], Figure]:
        return lambda r: r.fig("peers", "concurrency", _peers_first_batch(r), system, key)

    def text(system: str) -> Callable[[Results], str]:
        return lambda r: spread_text(figure(system, rounds_key)(r)) + unit

    return Candidate(
        "peers",
        "bench_peers.py, fresh processes in turn",
        figure("operative", ratio_key),
        text("floor"),
        text("operative"),
    )


def _peers(
    label: str | Callable[[Results], str], section: str, ratio_key: str, key: str, unit: str
) -> Candidate:
    """operative's ratio to the floor in a section of ``peers.json`` with rounds, with the
    floor's and operative's figures."""
    return _recorded("peers", label, section, (ratio_key, key, key), unit)


def _durable(source: str, label: str, prefix: tuple[str, ...], name: str) -> Candidate:
    """operative's durable overhead per step on ``name`` (a backend, or a backend's
    idempotent-tool runs) as ``source`` recorded it, next to the same run in memory."""
    per = (*prefix, "per_step")
    return Candidate(
        source,
        label,
        _fig(source, *per, name, "overhead_us_per_step"),
        _text(source, (*per, "memory", "us_per_step"), " µs/step in memory"),
        _text(source, (*per, name, "overhead_us_per_step"), " µs"),
    )


_ROUNDS = "bench_peers.py, every system in one process, in rounds"
_FRESH = "bench_loop.py, fresh processes"

GOALS: tuple[Goal, ...] = (
    Goal(
        "µs per step (20-step run)",
        1.3,
        "ratio",
        (
            _loop(
                "per_step", "x_floor_per_step", "us_per_step", "us_per_step", " µs", "bench_loop.py"
            ),
            _peers(_ROUNDS, "per_step", "x_floor_per_step", "us_per_step_rounds", " µs"),
            _loop_recomputed("per_step", "us_per_step", " µs", "bench_loop.py"),
        ),
    ),
    Goal(
        "2,000 concurrent 5-step runs, wall time",
        1.3,
        "ratio",
        (
            _peers(_batch_label, "batch_rounds", "x_floor_wall", "wall_s", " s"),
            _peers_batch("x_floor_wall", "wall_s_rounds", " s"),
            _loop("concurrency", "x_floor_wall", "wall_s", "wall_s", " s", _FRESH),
            _loop_recomputed("concurrency", "wall_s", " s", _FRESH),
        ),
    ),
    Goal(
        "peak RSS per in-flight run",
        1.3,
        "ratio",
        (
            _peers_batch("x_floor_kib_per_run", "kib_per_run_rounds", " KiB"),
            _loop(
                "concurrency",
                "x_floor_kib_per_run",
                "kib_per_run_rss",
                "kib_per_run_rss",
                " KiB",
                _FRESH,
            ),
            _loop_recomputed("concurrency", "kib_per_run_rss", " KiB", _FRESH),
        ),
    ),
    Goal(
        "peak RSS per in-flight run, virtual time",
        1.3,
        "ratio",
        (
            _peers(
                _virtual_memory_label,
                "virtual_memory",
                "x_floor_kib_per_run",
                "kib_per_run_rounds",
                " KiB",
            ),
        ),
    ),
    Goal(
        "fixed cost of a one-step run",
        3.0,
        "ratio",
        (
            _loop(
                "per_step",
                "x_floor_run_1_step",
                "us_run_fixed",
                "us_run_fixed",
                " µs",
                "bench_loop.py",
            ),
            _peers(_ROUNDS, "per_step", "x_floor_run_1_step", "us_run_1_step_rounds", " µs"),
            _loop_recomputed("per_step", "us_run_fixed", " µs", "bench_loop.py"),
        ),
    ),
    Goal(
        "`import operative` over `import trio`",
        1.3,
        "ratio",
        tuple(
            Candidate(
                source,
                label,
                _fig(source, *prefix, "operative", "x_floor"),
                _text(source, (*prefix, "floor", "ms"), " ms"),
                _text(source, (*prefix, "operative", "ms"), " ms"),
            )
            for source, prefix, label in (
                ("import", (), "bench_import.py"),
                ("peers", ("import",), "bench_peers.py, fresh interpreters in turn"),
            )
        ),
    ),
    *(
        Goal(
            f"durable step overhead, {BACKENDS[backend]}{ONE_COMMIT if variant else ''}",
            target,
            "us",
            (
                _durable(
                    "durable",
                    "bench_durable.py, over the same run in memory",
                    (),
                    backend + variant,
                ),
                _durable(
                    "peers",
                    "bench_peers.py (bench_durable.py's measurement, fewer runs)",
                    ("durable", "operative"),
                    backend + variant,
                ),
            ),
        )
        for backend, target in (("sqlite", 150.0), ("postgres", 600.0))
        for variant in ("", IDEMPOTENT)
    ),
)


def _peers_plain(goal_name: str) -> Candidate | None:
    """The ratio of medians from a ``peers.json`` without per-round ratios (an older
    shape, or a run with one round): the last resort for the ratio goals."""

    def size(r: Results) -> str:
        return _peers_first_batch(r)

    paths: dict[str, tuple[Callable[[Results], tuple[str, ...]], str, str]] = {
        GOALS[0].name: (lambda r: ("per_step",), "us_per_step", " µs"),
        GOALS[1].name: (lambda r: ("concurrency", size(r)), "wall_s", " s"),
        GOALS[2].name: (lambda r: ("concurrency", size(r)), "kib_per_run", " KiB"),
        GOALS[4].name: (lambda r: ("per_step",), "us_run_1_step", " µs"),
        GOALS[5].name: (lambda r: ("import_ms",), "", " ms"),
    }
    if goal_name not in paths:
        return None
    prefix, key, unit = paths[goal_name]

    def path(r: Results, system: str) -> tuple[str, ...]:
        return (*prefix(r), system, key) if key else (*prefix(r), system)

    return Candidate(
        "peers",
        "bench_peers.py (ratio of medians, no rounds)",
        lambda r: Figure(
            r.fig("peers", *path(r, "operative")).median / r.fig("peers", *path(r, "floor")).median
        ),
        lambda r: spread_text(r.fig("peers", *path(r, "floor"))) + unit,
        lambda r: spread_text(r.fig("peers", *path(r, "operative"))) + unit,
    )


def choose(goal: Goal, r: Results) -> tuple[Candidate, Figure]:
    """The first candidate with a spread over rounds, else the first with a figure."""
    found: list[tuple[Candidate, Figure]] = []
    reasons: list[str] = []
    plain = _peers_plain(goal.name) if goal.kind == "ratio" else None
    extra = (plain,) if plain is not None else ()
    for candidate in (*goal.candidates, *extra):
        try:
            found.append((candidate, candidate.ratio(r)))
        except Missing as exc:
            reasons.append(str(exc))
        except SHAPE_ERRORS as exc:
            reasons.append(f"`{candidate.source}.json`: unexpected JSON ({_shape(exc)})")
    for candidate, fig in found:
        if fig.has_spread:
            return candidate, fig
    if found:
        return found[0]
    raise Missing("; ".join(dict.fromkeys(reasons)))


SAME_WORK = "floor-same-work"


def _same_work_ratios(goal_name: str) -> Callable[[Results], tuple[Figure, Figure]]:
    """The goal's figure as (the same-work floor over the bare floor, operative over the
    same-work floor), from ``peers.json``."""
    paths: dict[str, Callable[[Results], tuple[tuple[str, ...], str, str]]] = {
        GOALS[0].name: lambda r: (("per_step",), "x_floor_per_step", "x_same_work_per_step"),
        GOALS[1].name: lambda r: (("batch_rounds",), "x_floor_wall", "x_same_work_wall"),
        GOALS[2].name: lambda r: (
            ("concurrency", _peers_first_batch(r)),
            "x_floor_kib_per_run",
            "x_same_work_kib_per_run",
        ),
        GOALS[3].name: lambda r: (
            ("virtual_memory",),
            "x_floor_kib_per_run",
            "x_same_work_kib_per_run",
        ),
        GOALS[4].name: lambda r: (("per_step",), "x_floor_run_1_step", "x_same_work_run_1_step"),
        GOALS[5].name: lambda r: (("import",), "x_floor", "x_same_work"),
    }
    where = paths.get(goal_name)

    def read(r: Results) -> tuple[Figure, Figure]:
        if where is None:
            raise Missing("no same-work figure for this goal")
        prefix, to_floor, to_same = where(r)
        return (
            r.fig("peers", *prefix, SAME_WORK, to_floor),
            r.fig("peers", *prefix, "operative", to_same),
        )

    return read


def goal_rows(r: Results) -> list[list[str]]:
    rows = []
    for goal in GOALS:
        target = f"≤ {goal.target:g}× floor" if goal.kind == "ratio" else f"≤ {goal.target:g} µs"
        try:
            candidate, fig = choose(goal, r)
        except Missing as exc:
            rows.append([goal.name, target, "–", "–", NOT_MEASURED, f"– ({exc})", "–", "–", "–"])
            continue
        value = ratio_text(fig) if goal.kind == "ratio" else spread_text(fig, unit=" µs")
        if fig.median > goal.target:
            met = "**not met**"
        elif fig.high is not None and fig.high > goal.target:
            met = "met (median; not every round)"
        else:
            met = "met"
        label = candidate.label
        source = attempt(label, r, fallback="–") if callable(label) else label
        source += " (quick smoke run)" if r.quick(candidate.source) else ""
        try:
            same_floor, over_same = _same_work_ratios(goal.name)(r)
            same_cells = [ratio_text(same_floor), ratio_text(over_same)]
        except Missing:
            same_cells = ["–", "–"]
        except SHAPE_ERRORS:
            same_cells = ["–", "–"]
        rows.append(
            [
                goal.name,
                target,
                attempt(candidate.floor, r, fallback="–"),
                attempt(candidate.ours, r, fallback="–"),
                value,
                source,
                met,
                *same_cells,
            ]
        )
    return rows


GOALS_HEADER = [
    "goal",
    "target",
    "floor",
    "operative",
    "operative (median, min–max)",
    "measured by",
    "",
    "same-work floor × floor",
    "operative × same-work floor",
]


def render_goals(r: Results) -> str:
    text = [
        "",
        "The goals are ratios to the bare floor (`benchmarks/peers/floor.py`: a Trio loop "
        "over plain dicts). The last two columns set the same figure against the "
        "same-work floor (`benchmarks/peers/floor_same_work.py`: a hand-written Trio loop "
        "doing the work the design requires of a run), from `peers.json`, measured in the "
        "same rounds: what the design's guarantees cost by themselves, and what "
        "operative costs over them.",
    ]
    return "\n".join(table(GOALS_HEADER, goal_rows(r)) + text)


# --------------------------------------------------------------------------------------
# the sections (each is also a docs/comparison.md marker)
# --------------------------------------------------------------------------------------


def render_machine(r: Results) -> str:
    source = next((s for s in ("peers", "loop", "durable") if s in r.data), None)
    if source is None:
        raise Missing("no benchmark JSON found")
    m = r.get(source, "machine")
    text = (
        f"Figures from `nox -s bench` on {r.data[source].get('date', 'an unrecorded date')}: "
        f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, Python {m.get('python', '?')}, "
        f"trio {m.get('trio', '?')}, msgspec {m.get('msgspec', '?')}."
    )
    load = r.data[source].get("load_before"), r.data[source].get("load_after")
    if all(isinstance(x, list) and x for x in load):
        text += f" Load average {load[0][0]:.2f} before and {load[1][0]:.2f} after the comparison."
    quick = [s for s in SOURCES if r.quick(s)]
    if quick:
        text += (
            " **Smoke run** (`--quick`) for "
            + ", ".join(f"`{s}.json`" for s in quick)
            + ": a few samples, not figures to quote."
        )
    return text


def _maybe(value: Any) -> Figure | None:
    try:
        return figure(value)
    except Missing:
        return None


def _ratio_or_plain(spread: Any, value: float, floor: float | None) -> Figure | None:
    """The per-round ratio spread when the JSON has one, else the ratio of the medians."""
    found = _maybe(spread)
    if found is None and floor:
        found = Figure(value / floor)
    return found


def _peer_row(r: Results, s: str, size: str) -> list[str]:
    peers = r.data["peers"]
    per = r.get("peers", "per_step", s)
    floor_per = peers["per_step"].get("floor", {})
    is_floor = s == "floor"
    cells = ["floor (bare Trio)" if is_floor else "floor, same work" if s == SAME_WORK else s]
    for key, spread_key in (
        ("us_per_step", "x_floor_per_step"),
        ("us_run_1_step", "x_floor_run_1_step"),
    ):
        # The median of the rounds' medians when there are rounds, as the ratios are.
        value = figure(per.get(f"{key}_rounds", per[key])).median
        floor_value = _maybe(floor_per.get(f"{key}_rounds", floor_per.get(key)))
        ratio = _ratio_or_plain(
            per.get(spread_key), value, floor_value.median if floor_value else None
        )
        cells.append(with_ratio(number(value), ratio, is_floor))
    par = peers.get("parallel", {}).get(s)
    cells.append(
        f"{number(par['wall_s'] * 1000, 0)} ({'parallel' if par['parallel'] else 'one by one'})"
        if par
        else "–"
    )
    c = peers.get("concurrency", {}).get(size, {}).get(s)
    floor = peers.get("concurrency", {}).get(size, {}).get("floor") or {}
    if not c:
        cells += ["–", "–"]
    elif c.get("not_run_after"):
        cells += ["not run", "–"]
    else:
        if c.get("stopped_after_s"):
            cells.append(f"> {c['stopped_after_s']:.0f} (stopped, {c['finished']:,} done)")
        else:
            wall = figure(c.get("wall_s_rounds", c["wall_s"])).median
            ratio = _maybe(c.get("x_floor_wall"))
            if ratio is None and floor.get("wall_s"):
                ratio = Figure(c["wall_s"] / floor["wall_s"])
            cells.append(with_ratio(number(wall), ratio, is_floor))
        kib = figure(c.get("kib_per_run_rounds", c["kib_per_run"])).median
        ratio = _maybe(c.get("x_floor_kib_per_run"))
        if ratio is None and floor.get("kib_per_run"):
            ratio = Figure(c["kib_per_run"] / floor["kib_per_run"])
        cells.append(with_ratio(number(kib, 1), ratio, is_floor))
    imp = peers.get("import", {}).get(s)
    best = peers.get("import_ms", {})
    if imp:
        cells.append(with_ratio(number(imp["best_ms"], 0), _maybe(imp.get("x_floor")), is_floor))
    elif s in best:
        ratio = Figure(best[s] / best["floor"]) if best.get("floor") else None
        cells.append(with_ratio(number(best[s], 0), ratio, is_floor))
    else:
        cells.append("–")
    return cells


def render_peers(r: Results) -> str:
    systems = r.get("peers", "systems")
    size = _peers_first_batch(r)
    r.get("peers", "per_step")
    header = [
        "",
        "µs/step (× floor)",
        "1-step run, µs (× floor)",
        "50 × 10 ms tools, ms",
        f"{int(size):,} runs, wall s (× floor)",
        f"{int(size):,} runs, KiB/run (× floor)",
        "import, ms (× floor)",
    ]
    rows = [_peer_row(r, s, size) for s in systems]
    per = r.get("peers", "per_step", "floor")
    imp = r.data["peers"].get("import", {})
    c = r.data["peers"].get("concurrency", {}).get(size, {}).get("operative", {})
    fresh = c.get("fresh_rounds", 1)
    if "rounds" in per:
        text = (
            "Ratios are medians of per-round ratios to the floor, with their range: µs/step "
            f"and the 1-step run over {per['rounds']} rounds of every system in one process "
            f"({per.get('repetitions', '?')} runs each); import over "
            f"{plural(imp.get('attempts', '?'), 'round')} of one fresh interpreter per system "
            "(the cell is the best time); the floor and operative batches over "
            f"{fresh} fresh process{'' if fresh == 1 else 'es'} each, in turn (a peer's batch "
            "runs once)."
        )
    else:
        text = (
            "Ratios of medians to the floor's: this `peers.json` predates the per-round "
            "ratios, so no spread is shown."
        )
    notes = ["", text]
    return "\n".join(table(header, rows) + notes)


def render_batches(r: Results) -> str:
    """The larger batches, stopped peers and the same-process batch ratio, as sentences."""
    conc = r.get("peers", "concurrency")
    sizes = sorted(int(n) for n in r.get("peers", "batch_sizes"))
    lines = []
    order = r.get("peers", "systems")
    parallel = r.data["peers"].get("parallel", {})
    if parallel:
        together = [s for s in order if parallel.get(s, {}).get("parallel")]
        apart = [s for s in order if s in parallel and not parallel[s].get("parallel")]
        lines.append(
            "- 50 tool calls in one step: run concurrently by "
            + (", ".join(together) or "no system")
            + (f"; one after another by {', '.join(apart)}" if apart else "")
            + "."
        )
    order = r.get("peers", "systems")
    for n in sizes[1:]:
        row = conc.get(str(n), {})
        parts = []
        for s, c in ((s, row[s]) for s in order if s in row):
            if c.get("not_run_after"):
                parts.append(f"{s} not run (stopped at {c['not_run_after']:,})")
            elif c.get("stopped_after_s"):
                parts.append(
                    f"{s} stopped after {c['stopped_after_s']:.0f} s with {c['finished']:,} "
                    f"of {c['runs']:,} runs finished ({number(c['kib_per_run'], 1)} KiB per run)"
                )
            else:
                parts.append(
                    f"{s} {number(c['wall_s'])} s ({number(c['kib_per_run'], 1)} KiB per run)"
                )
        lines.append(f"- {n:,} concurrent runs: " + "; ".join(parts) + ".")
    for n in sizes[:1]:
        row = conc.get(str(n), {})
        stopped = [
            f"{s} stopped after {row[s]['stopped_after_s']:.0f} s ({row[s]['finished']:,} done)"
            for s in order
            if s in row and row[s].get("stopped_after_s")
        ]
        if stopped:
            lines.append(f"- {n:,} concurrent runs: " + "; ".join(stopped) + ".")
    lines.append("- Same-process batch: " + attempt(_same_process_batch, r))
    return "\n".join(lines)


def _same_process_batch(r: Results) -> str:
    b = r.get("peers", "batch_rounds")
    op, fl = figure(b["operative"]["wall_s"]), figure(b["floor"]["wall_s"])
    return (
        f"{b['runs']:,} runs of the floor and operative in one process, "
        f"{plural(b['rounds'], 'round')}: floor {spread_text(fl)} s, "
        f"operative {spread_text(op)} s, "
        f"{ratio_text(figure(b['operative']['x_floor_wall']))} the floor."
    )


def render_gc(r: Results) -> str:
    b = r.get("peers", "batch_rounds")
    rows = []
    for s in r.get("peers", "systems"):
        if s not in b:
            continue
        x = b[s]
        rows.append(
            [
                s,
                spread_text(figure(x["cpu_s"])),
                spread_text(figure(x["gc_s"])),
                f"{x['gc_collections_per_batch']:.0f}",
                share_text(figure(x["gc_share_callbacks"])),
                spread_text(figure(x["cpu_no_gc_s"])),
                share_text(figure(x["gc_share_disabled"])),
            ]
        )
    header = [
        f"{b['runs']:,} runs × {b.get('steps', 5)} steps",
        "CPU s",
        "in the GC, s",
        "collections",
        "GC share (callbacks)",
        "CPU s, `gc.disable()`",
        "GC share (disabled)",
    ]
    return "\n".join(
        [
            *table(header, rows),
            "",
            f"One process, {plural(b['rounds'], 'round')} of each batch with the cyclic GC on "
            "and then off (the heap frozen after start-up). GC share: the CPU time "
            "`gc.callbacks` sees between each collection's start and stop over the batch's "
            "CPU time, and one minus the CPU time with `gc.disable()` over the CPU time with "
            "it on (that one also counts what collections do to the caches).",
            *_batch_counts(r),
        ]
    )


def _batch_counts(r: Results) -> list[str]:
    """The batch counted under virtual time (``bench_peers.py --instructions``), when it
    was: instructions and cache misses per run, each with its ratio to the floor."""
    try:
        counted = r.get("peers", "batch_instructions")
    except Missing:
        return []
    rows = []
    for s in r.get("peers", "systems"):
        if s not in counted:
            continue
        x = counted[s]
        rows.append(
            [
                s,
                f"{x['instructions_per_run'] / 1000:,.0f}k ({x['x_floor']['instructions']:.2f}×)",
                f"{x['d1_misses_per_run'] / 1000:,.1f}k ({x['x_floor']['d1_misses']:.2f}×)",
                f"{x['ll_misses_per_run']:,.0f} ({x['x_floor']['ll_misses']:.2f}×)",
                f"{x['gc_collections']:,}",
            ]
        )
    header = [
        f"{counted['runs']:,} runs × {counted.get('steps', 5)} steps, virtual time",
        "instructions per run",
        "L1 data misses per run",
        "last-level misses per run",
        "collections",
    ]
    return [
        "",
        *table(header, rows),
        "",
        "The same batch under `trio.testing.MockClock` (no run waits for the wall clock), "
        "one process per system, counted by valgrind's cachegrind net of the same process "
        "with an empty batch: work a loaded machine cannot move (the counts vary by under "
        "1% between processes; the time ratios above, by a third). Misses are "
        "cachegrind's simulated caches.",
    ]


def render_memory(r: Results) -> str:
    mem = r.get("peers", "memory")
    systems = [s for s in r.get("peers", "systems") if s in mem]
    if not systems:
        raise Missing("`peers.json` `memory` has no system")
    origins: list[str] = []
    for s in systems:
        for k in mem[s]["by_origin_bytes_per_run"]:
            if k not in origins:
                origins.append(k)
    floor = mem.get("floor")
    header = ["bytes per in-flight run, by allocating file", *systems]
    rows = [
        [o, *(number(mem[s]["by_origin_bytes_per_run"].get(o, 0.0), 0) for s in systems)]
        for o in origins
    ]
    total = ["**total** (tracemalloc)"]
    for s in systems:
        cell = f"**{number(mem[s]['bytes_per_run'], 0)}**"
        if floor and s != "floor":
            cell += f" ({number(mem[s]['bytes_per_run'] / floor['bytes_per_run'], 1)}×)"
        total.append(cell)
    rows.append(total)
    rows.append(["GC-tracked objects", *(number(mem[s]["gc_objects_per_run"], 1) for s in systems)])
    out = table(header, rows)
    for s in systems:
        out += [
            "",
            f"Top types, {s} (GC-tracked objects per run, `sys.getsizeof` bytes per run):",
            "",
            *table(
                ["type", "objects", "bytes"],
                (
                    [
                        f"`{t['type']}`",
                        number(t["objects_per_run"], 1),
                        number(t["bytes_per_run"], 0),
                    ]
                    for t in mem[s]["top_types"]
                ),
            ),
        ]
        lines = mem[s].get("top_lines") or []
        if lines:
            out += [
                "",
                f"Top allocating lines, {s} (bytes per run): "
                + ", ".join(f"`{x['where']}` {number(x['bytes_per_run'], 0)}" for x in lines[:8])
                + ".",
            ]
    first = mem[systems[0]]
    out += [
        "",
        f"{first['runs']:,} concurrent 5-step runs per system, each in a fresh process, the "
        "snapshot taken once every run has started and two model latencies have passed "
        f"({first['in_flight']:,} in flight, none finished), against one taken before the "
        "batch. `tracemalloc` names the allocating frame's file; types come from "
        "`gc.get_objects()` (containers only: strings and numbers are not tracked).",
    ]
    return "\n".join(out)


def render_import(r: Results) -> str:
    source, prefix = ("import", ()) if "import" in r.data else ("peers", ("import",))
    rows = []
    for s in ("floor", "operative"):
        x = r.get(source, *prefix, s)
        ratio = "1×" if s == "floor" else ratio_text(figure(x["x_floor"]))
        rows.append([f"`{x.get('statement', s)}`", spread_text(figure(x["ms"]), 0) + " ms", ratio])
    attempts = r.get(source, *prefix).get("attempts", "?")
    lines = [
        *table(["", "ms (median, min–max)", "× `import trio`"], rows),
        "",
        f"{plural(attempts, 'round')} of one fresh interpreter per statement, in turn.",
    ]
    counts = r.data.get("import", {}).get("instructions") or {}
    base, trio, ours = (
        counts.get(k) for k in ("python (baseline)", "import trio", "import operative")
    )
    if isinstance(base, int) and isinstance(trio, int) and isinstance(ours, int) and trio > base:
        lines[-1] += (
            f" Instructions (valgrind, once; they move by about 0.1% between runs, the times"
            f" above by half): `import operative` {number((ours - base) / 1e6, 1)} M net of"
            f" `python -c pass`, `import trio` {number((trio - base) / 1e6, 1)} M:"
            f" {ratio_text(figure((ours - base) / (trio - base)))}."
        )
    return "\n".join(lines)


def render_durable(r: Results) -> str:
    """operative's overhead from ``durable.json`` (else ``peers.json``), langgraph's from
    ``peers.json``, Temporal's from ``temporal.json``."""
    rows = []
    if r.has("durable", "per_step"):
        per, where = r.get("durable", "per_step"), "`bench_durable.py`"
    else:
        per = r.data.get("peers", {}).get("durable", {}).get("operative", {}).get("per_step", {})
        where = "`bench_peers.py`"
    for name, label in [
        (base + variant, BACKENDS[base] + variant)
        for base in BACKENDS
        for variant in ("", IDEMPOTENT)
    ]:
        if name in per:
            x = per[name]
            commits = x.get("commits_per_step_marginal", x.get("commits_per_step"))
            floor = x.get("floor_overhead_us_per_step")
            rows.append(
                [
                    f"operative, {label}"
                    + (" (local, `fsync=off`)" if name.startswith("postgres") else ""),
                    spread_text(
                        figure(x.get("overhead_us_per_step_spread", x["overhead_us_per_step"])), 0
                    ),
                    f"{commits:g} commit{'' if commits == 1 else 's'}"
                    if commits is not None
                    else "–",
                    spread_text(figure(floor), 0) if floor is not None else "–",
                    ratio_text(figure(x["x_floor"])) if "x_floor" in x else "–",
                    _per_commit(x.get("x_floor"), commits),
                    where,
                ]
            )
    lg = r.data.get("peers", {}).get("durable", {}).get("langgraph", {}).get("per_step", {})
    for name, label in (("memory", "`InMemorySaver`"), ("sqlite", "`AsyncSqliteSaver`")):
        if name in lg:
            x = lg[name]
            steps = lg.get("steps", 20)
            cps = x.get("checkpoints_per_run")
            rows.append(
                [
                    f"langgraph, {label}",
                    spread_text(figure(x["overhead_us_per_step"]), 0),
                    f"{cps / steps:.2f} checkpoints" if cps else "–",
                    "–",
                    "–",
                    "–",
                    "`bench_peers.py`",
                ]
            )
    if r.has("temporal", "per_step", "temporal", "overhead_us_per_step"):
        t = r.get("temporal", "per_step", "temporal")
        writes = t.get("writes_per_step")
        rows.append(
            [
                "operative on Temporal (worker in the same process)",
                spread_text(r.fig("temporal", "per_step", "temporal", "overhead_us_per_step"), 0),
                f"{writes:g} Updates" if isinstance(writes, int | float) else "–",
                "–",
                "–",
                "–",
                "`bench_temporal.py`",
            ]
        )
    if not rows:
        raise Missing("neither `durable.json` nor `peers.json` has durable per-step figures")
    header = [
        "",
        "overhead µs/step",
        "writes per step",
        "floor µs/step",
        "× floor",
        "× floor per commit",
        "measured by",
    ]
    return "\n".join(
        [
            *table(header, rows),
            "",
            "The floor writes one row a step. × floor per commit divides the ratio by "
            "operative's commits per step: a step whose tool is not idempotent commits "
            "twice (the call's start before it runs, its result before the run goes on).",
        ]
    )


def _per_commit(x_floor: Any, commits: Any) -> str:
    """The ratio to the floor's one write a step, per commit operative makes a step."""
    if x_floor is None or not isinstance(commits, int | float) or commits <= 0:
        return "–"
    f = figure(x_floor)
    return ratio_text(
        Figure(
            f.median / commits,
            None if f.low is None else f.low / commits,
            None if f.high is None else f.high / commits,
            f.rounds,
        )
    )


def _durable_levels(r: Results) -> dict[str, dict[str, Any]]:
    """``{backend: {runs: entry}}`` from either orientation of ``concurrency``."""
    conc = r.get("durable", "concurrency")
    if not isinstance(conc, dict) or not conc:
        raise Missing("`durable.json` `concurrency` is empty")
    if any(k in BACKENDS for k in conc):
        return {b: v for b, v in conc.items() if b in BACKENDS and isinstance(v, dict)}
    flipped: dict[str, dict[str, Any]] = {}
    for runs, by_backend in conc.items():
        for backend, entry in by_backend.items():
            flipped.setdefault(backend, {})[str(runs)] = entry
    return flipped


def _steps_per_s(entry: Any) -> str:
    if not isinstance(entry, dict) or "steps_per_s" not in entry:
        raise Missing("no `steps_per_s`")
    return spread_text(figure(entry["steps_per_s"]), 0)


def render_durable_concurrency(r: Results) -> str:
    levels = _durable_levels(r)
    runs = sorted({n for v in levels.values() for n in v} | set(DURABLE_LEVELS), key=int)
    rows = []
    for backend, label in BACKENDS.items():
        entries = levels.get(backend)
        if entries is None:
            rows.append([label, *(["not measured"] * len(runs))])
            continue
        cells = [label]
        for n in runs:
            entry = entries.get(n)
            if entry is None:
                cells.append("not measured")
                continue
            cells.append(attempt(_steps_per_s, entry))
        rows.append(cells)
    notes = r.data["durable"].get("notes") or []
    header = [
        "durable steps/s",
        *(f"{int(n):,} concurrent run{'s' if n != '1' else ''}" for n in runs),
    ]
    return "\n".join(table(header, rows) + ([""] + [f"- {n}" for n in notes] if notes else []))


def _fixed_ratio(system: str, per: dict[str, Any]) -> str:
    if system == "floor":
        return "1×"
    if "x_floor_run_1_step" in per:
        return ratio_text(figure(per["x_floor_run_1_step"]))
    return "–"


def render_fixed_cost(r: Results) -> str:
    rows = []
    for s in r.get("peers", "systems"):
        per = r.get("peers", "per_step", s)
        same = per.get("x_same_work_run_1_step")
        rows.append(
            [
                s,
                spread_text(figure(per.get("us_run_1_step_rounds", per["us_run_1_step"]))),
                _fixed_ratio(s, per),
                number(per["us_per_step_marginal"], 1),
                ratio_text(figure(same)) if same is not None else "–",
            ]
        )
    header = [
        "",
        "1-step run, µs (median, min–max)",
        "× floor",
        "marginal µs/step",
        "× same-work floor",
    ]
    return "\n".join(table(header, rows))


def render_same_work(r: Results) -> str:
    """The two floors and operative side by side, with the three ratios."""
    peers = r.data.get("peers")
    if peers is None:
        raise Missing(r.why_missing["peers"])
    per = r.get("peers", "per_step")
    if SAME_WORK not in per:
        raise Missing(f"`peers.json` has no `{SAME_WORK}` (bench_peers.py run without it)")
    size = _peers_first_batch(r)
    rows = []

    def row(label: str, section: dict[str, Any], key: str, ratio: str, unit: str) -> None:
        """``section[system][key]`` for the three systems, and the ratios ``x_floor`` and
        ``x_same_work`` + ``ratio`` (a figure missing: no row)."""
        try:
            cells = [
                spread_text(figure(section[s][key])) + unit
                for s in ("floor", SAME_WORK, "operative")
            ]
            cells += [
                ratio_text(figure(section[SAME_WORK][f"x_floor{ratio}"])),
                ratio_text(figure(section["operative"][f"x_floor{ratio}"])),
                ratio_text(figure(section["operative"][f"x_same_work{ratio}"])),
            ]
        except (Missing, *SHAPE_ERRORS):
            return
        rows.append([label, *cells])

    row("µs per step (20-step run)", per, "us_per_step_rounds", "_per_step", " µs")
    row("one-step run (fixed cost)", per, "us_run_1_step_rounds", "_run_1_step", " µs")
    batch = peers.get("batch_rounds", {})
    row(f"{int(size):,} runs × 5 steps, wall (one process)", batch, "wall_s", "_wall", " s")
    conc = peers.get("concurrency", {}).get(size, {})
    row(
        f"{int(size):,} runs, peak RSS per run (fresh processes)",
        conc,
        "kib_per_run_rounds",
        "_kib_per_run",
        " KiB",
    )
    virtual = peers.get("virtual_memory", {})
    lockstep = f"{virtual.get('runs', 0):,} runs in lockstep (MockClock)"
    row(f"{lockstep}, peak RSS per run", virtual, "kib_per_run_rounds", "_kib_per_run", " KiB")
    row(
        f"{lockstep}, RSS of one more run in flight",
        virtual,
        "marginal_kib_per_run_rounds",
        "_marginal",
        " KiB",
    )
    row("import", peers.get("import", {}), "ms", "", " ms")
    header = [
        "",
        "bare floor",
        "same-work floor",
        "operative",
        "same-work × bare",
        "operative × bare",
        "operative × same-work",
    ]
    return "\n".join(
        [
            *table(header, rows),
            "",
            "Medians with their min–max over rounds; each ratio is the median of per-round "
            "ratios measured in the same process (peak RSS: fresh processes in turn). The "
            "same-work floor snapshots the caller's history, runs its loop in a "
            "`trio.CancelScope` when anything but its caller can cancel it (in these runs "
            "nothing can, so it enters none; every operative run enters its run scope), "
            "builds msgspec records "
            "with ids for every message, the "
            "request, each tool result, each step and the result, decodes each call's "
            "arguments into a msgspec `Struct`, and answers every call exactly once, "
            "whatever ends the run; no events, hooks or extensions (a run with none of "
            "them owes none of their cost).",
        ]
    )


def _pays(counts: Any) -> str:
    if counts is None:
        return "?"
    one, step = counts
    if not one and not step:
        return "–"
    return f"{one:g} + {step:g}/step"


def render_breakdown(r: Results) -> str:
    """The cost ledger of ``bench_breakdown.py``: components, whole runs, operative's phases."""
    rows_in = r.get("breakdown", "rows")
    systems = r.get("breakdown", "systems")
    ledger_rows = []
    for x in rows_in:
        if x["group"] == "whole run":
            continue
        instr = x.get("instructions")
        ledger_rows.append(
            [
                x["component"],
                spread_text(figure(x["us"]), 2),
                number(instr, 0) if isinstance(instr, int | float) else "–",
                *(_pays(x["pays"].get(s)) for s in ("floor", SAME_WORK, "operative")),
                x.get("note") or "",
            ]
        )
    header = [
        "component (one occurrence)",
        "µs (median, min–max)",
        "instructions",
        "bare floor",
        "same-work floor",
        "operative",
        "",
    ]
    out = [
        *table(header, ledger_rows),
        "",
        "Counts: times in a one-step run + times per further step (`–`: never; `?`: not "
        "counted). The floors' counts are read from their code; operative's from a "
        "`cProfile` of its runs where the profile can see them (records built in C are "
        "counted from the code).",
        "",
    ]
    long = r.data["breakdown"].get("long_steps", 20)

    def pair(value: Any, ledger: Any, digits: int) -> str:
        if value is None:
            return "–"
        text = number(value, digits)
        if ledger is not None and value:
            text += f" ({number(ledger, digits)}, {ledger / value * 100:.0f}%)"
        return text

    labels = {"floor": "floor (bare Trio)", SAME_WORK: "floor, same work"}
    whole_rows = [
        [
            labels.get(s, s),
            pair(x["us_run_1_step"], x.get("ledger_us_run_1_step"), 1),
            pair(x.get("instructions_run_1_step"), x.get("ledger_instructions_run_1_step"), 0),
            pair(x["us_marginal_step"], x.get("ledger_us_marginal_step"), 1),
            pair(
                x.get("instructions_marginal_step"),
                x.get("ledger_instructions_marginal_step"),
                0,
            ),
        ]
        for s, x in systems.items()
    ]
    out += [
        *table(
            [
                "",
                "one-step run, µs (ledger)",
                "instructions (ledger)",
                "marginal step, µs (ledger)",
                "instructions (ledger)",
            ],
            whole_rows,
        ),
        "",
        f"Whole runs in the same rounds; the marginal step is ({long}-step run − one-step "
        f"run) / {long - 1}. In brackets, the ledger: the sum of count × cost over the "
        "components above that the system pays (operative's phases left out: they split "
        "the same run another way), and its share of the whole; the rest is the loop's "
        "own code between the components.",
    ]
    ratio_rows = []
    floor_x, same_x, op_x = (systems.get(s) for s in ("floor", SAME_WORK, "operative"))
    if floor_x and same_x and op_x:
        for label, key in (
            ("one-step run, µs", "us_run_1_step"),
            ("one-step run, instructions", "instructions_run_1_step"),
            ("marginal step, µs", "us_marginal_step"),
            ("marginal step, instructions", "instructions_marginal_step"),
        ):
            if all(x.get(key) for x in (floor_x, same_x, op_x)):
                ratio_rows.append(
                    [
                        label,
                        f"{same_x[key] / floor_x[key]:.2f}×",
                        f"{op_x[key] / floor_x[key]:.2f}×",
                        f"{op_x[key] / same_x[key]:.2f}×",
                    ]
                )
    if ratio_rows:
        out += [
            "",
            *table(
                ["", "same-work × bare", "operative × bare", "operative × same-work"],
                ratio_rows,
            ),
            "",
            "Ratios of the medians above (one process, interleaved; instructions from the "
            "callgrind run, which do not move with the machine's load).",
        ]
    phases = r.data["breakdown"].get("operative_phases")
    if phases:
        instr = phases.get("phases_instructions") or {}
        phase_rows = [
            [
                name,
                number(us, 1),
                number(instr[name], 0) if name in instr else "–",
            ]
            for name, us in phases["phases_us"].items()
        ]
        phase_rows.append(
            [
                "the rest (`agent.run`'s own code, the benchmark's adapter)",
                number(phases["rest_us"], 1),
                number(phases["rest_instructions"], 0) if "rest_instructions" in phases else "–",
            ]
        )
        phase_rows.append(
            [
                "**operative's one-step run**",
                f"**{number(phases['us_run_1_step'], 1)}**",
                f"**{number(phases['instructions_run_1_step'], 0)}**"
                if "instructions_run_1_step" in phases
                else "–",
            ]
        )
        out += [
            "",
            *table(["operative's one-step run, by phase", "µs", "instructions"], phase_rows),
            "",
            "Each phase measured on its own. Their instructions add up to the whole run's "
            "(the rest is within the count's noise), but alone they run faster than inside "
            "the whole run, whose larger code footprint costs more time per instruction "
            "(caches, branch prediction): the rest in µs is that difference.",
        ]
    profiles = r.data["breakdown"].get("operative_profile", {})
    for key, what in (("one_step", "one-step run"), ("long", f"{long}-step run")):
        profile = profiles.get(key)
        if not profile:
            continue
        top = [t for t in profile["top_own_time"][:12] if t["share"] >= 0.01]
        out += [
            "",
            f"Most own time in operative's {what} (`cProfile`, share of the profiled time, "
            "calls per run; a coroutine's resumptions count as calls): "
            + ", ".join(
                f"`{t['function']}` {t['share'] * 100:.0f}% ({number(t['calls_per_run'], 1)})"
                for t in top
            )
            + ".",
        ]
    how = r.data["breakdown"].get("instructions_by")
    if how:
        out += ["", f"Instructions: {how}."]
    return "\n".join(out)


@dataclass(frozen=True)
class RealisticGoal:
    """One goal of the realistic-adapter variant: ``ratio`` read from a
    ``realistic.json``-shaped dict, kept ``at_most`` (≤) or at least (≥) ``target``."""

    name: Callable[[dict[str, Any]], str]
    target: float
    at_most: bool
    ratio: Callable[[dict[str, Any]], Figure]
    against: Callable[[dict[str, Any]], str]
    ours: Callable[[dict[str, Any]], str]


def _realistic_fig(*path: str) -> Callable[[dict[str, Any]], Figure]:
    def read(data: dict[str, Any]) -> Figure:
        node: Any = data
        for i, key in enumerate(path):
            if not isinstance(node, dict) or key not in node:
                raise Missing(f"no `{'.'.join(path[: i + 1])}`")
            node = node[key]
        return figure(node)

    return read


def _realistic_text(label: str, *path: str, unit: str) -> Callable[[dict[str, Any]], str]:
    read = _realistic_fig(*path)
    return lambda data: f"{label}{spread_text(read(data))}{unit}"


def _realistic_goals() -> tuple[RealisticGoal, ...]:
    """The issue's goals for one run, one path, on the realistic adapter."""
    goals = [
        RealisticGoal(
            lambda d: f"µs per step ({d.get('steps', '?')}-step run) × floor",
            3.0,
            True,
            _realistic_fig("per_step", "operative", "x_floor_per_step"),
            _realistic_text("", "per_step", "floor", "us_per_step_rounds", unit=" µs"),
            _realistic_text("", "per_step", "operative", "us_per_step_rounds", unit=" µs"),
        ),
        RealisticGoal(
            lambda d: (
                f"{d.get('batch_rounds', {}).get('runs', 2000):,}-run batch, wall time "
                "× floor (one process)"
            ),
            1.5,
            True,
            _realistic_fig("batch_rounds", "operative", "x_floor_wall"),
            _realistic_text("", "batch_rounds", "floor", "wall_s", unit=" s"),
            _realistic_text("", "batch_rounds", "operative", "wall_s", unit=" s"),
        ),
        RealisticGoal(
            lambda d: "peak RSS per in-flight run × floor (fresh processes)",
            1.5,
            True,
            _realistic_fig("concurrency", "operative", "x_floor_kib_per_run"),
            _realistic_text("", "concurrency", "floor", "kib_per_run_rounds", unit=" KiB"),
            _realistic_text("", "concurrency", "operative", "kib_per_run_rounds", unit=" KiB"),
        ),
        RealisticGoal(
            lambda d: "peak RSS per in-flight run × floor (lockstep, MockClock)",
            1.5,
            True,
            _realistic_fig("lockstep", "operative", "x_floor_kib_per_run"),
            _realistic_text("", "lockstep", "floor", "kib_per_run_rounds", unit=" KiB"),
            _realistic_text("", "lockstep", "operative", "kib_per_run_rounds", unit=" KiB"),
        ),
    ]
    goals.extend(
        RealisticGoal(
            lambda d, peer=peer: f"{peer} µs per step × operative's",
            50.0,
            False,
            _realistic_fig("per_step", peer, "x_operative_per_step"),
            _realistic_text(f"{peer}: ", "per_step", peer, "us_per_step_rounds", unit=" µs"),
            _realistic_text("", "per_step", "operative", "us_per_step_rounds", unit=" µs"),
        )
        for peer in ("pydantic-ai", "openai-agents", "langgraph")
    )
    return tuple(goals)


REALISTIC_GOALS = _realistic_goals()


def _met(f: Figure, target: float, at_most: bool) -> str:
    """Whether a ratio meets its goal: by its median, and in every round or not."""
    worst = f.high if at_most else f.low
    if (f.median > target) if at_most else (f.median < target):
        return "**not met**"
    if worst is not None and ((worst > target) if at_most else (worst < target)):
        return "met (median; not every round)"
    return "met"


def render_realistic(r: Results) -> str:
    """The realistic-adapter variant's goals (``realistic.json``), with the ratios of the
    baseline run (``realistic_before.json``) beside them."""
    now, before = r.data.get("realistic"), r.data.get("realistic_before")
    if now is None and before is None:
        raise Missing(f"{r.why_missing['realistic']}; {r.why_missing['realistic_before']}")
    rows = []
    for goal in REALISTIC_GOALS:
        target = f"{'≤' if goal.at_most else '≥'} {goal.target:g}×"
        name = attempt(goal.name, now or before, fallback="–")
        if now is None:
            cells = ["–", "–", NOT_MEASURED, "–"]  # the sentence below says why
        else:
            try:
                fig = goal.ratio(now)
            except Missing as exc:
                cells = ["–", "–", f"not measured: {exc}", "–"]
            else:
                cells = [
                    attempt(goal.against, now, fallback="–"),
                    attempt(goal.ours, now, fallback="–"),
                    ratio_text(fig),
                    _met(fig, goal.target, goal.at_most),
                ]
        if before is None:
            was = "–"
        else:
            was = attempt(lambda d, g=goal: ratio_text(g.ratio(d)), before, fallback="–")
        rows.append([name, target, cells[0], cells[1], cells[2], was, cells[3]])
    header = [
        "realistic adapter (one path)",
        "target",
        "floor (or the peer)",
        "operative",
        "ratio (median, min–max)",
        "before",
        "",
    ]

    def when(data: dict[str, Any] | None, name: str) -> str:
        if data is None:
            return f"`{name}.json`: {r.why_missing[name]}"
        quick = " (quick smoke run)" if data.get("quick") else ""
        label = f", {data['label']}" if data.get("label") else ""
        return f"`{name}.json`: {data.get('date', 'no date recorded')}{quick}{label}"

    text = [
        "",
        "Each system's model builds its step's response, tool call and usage when it is "
        "called, as a provider adapter converting the provider's JSON does "
        "(`benchmarks/bench_realistic.py`, `benchmarks/realistic/`); the floor is a bare "
        "Trio loop that builds plain dicts of the same shape and checkpoints once a step. "
        "µs per step: every system in one process, in rounds; the batch: 5-step runs with "
        "a 20 ms model, the floor's and operative's batches in one process, in rounds; "
        "peak RSS: fresh processes in turn (real clock), and the batch in lockstep on "
        "`MockClock`. A peer's ratio is its time over operative's, round by round. "
        f"Ratios from {when(now, 'realistic')}; before: {when(before, 'realistic_before')}.",
    ]
    over = (now or {}).get("over_prebuilt_us_per_step") or {}
    if isinstance(over, dict) and {"floor", "operative"} <= over.keys():
        replayed = [
            attempt(
                _realistic_text("", "per_step", f"{s}-prebuilt", "us_per_step_rounds", unit=" µs"),
                now or {},
                fallback="–",
            )
            for s in ("floor", "operative")
        ]
        text[-1] += (
            f" In the same rounds, the same runs over responses built before the run "
            f"(`bench_peers.py`'s adapters, arguments a JSON string the loop decodes) took "
            f"{replayed[0]} (floor) and {replayed[1]} (operative) a step; the difference, "
            "building the responses less decoding the arguments: "
            f"{over['floor']:+.1f} µs a step for the floor, {over['operative']:+.1f} µs for "
            "operative."
        )
    return "\n".join(table(header, rows) + text)


SECTIONS: dict[str, tuple[str, Callable[[Results], str]]] = {
    "machine": ("Machine", render_machine),
    "goals": ("Goals", render_goals),
    "peers": ("Against the peers", render_peers),
    "batches": ("Batches", render_batches),
    "same-work": ("Against the same-work floor", render_same_work),
    "fixed-cost": ("Fixed cost of a one-step run", render_fixed_cost),
    "breakdown": ("Where a run's time goes: the cost ledger", render_breakdown),
    "realistic": ("Realistic adapter (one path)", render_realistic),
    "import": ("Import", render_import),
    "gc": ("GC share of the batch", render_gc),
    "memory": ("Memory per in-flight run", render_memory),
    "durable": ("Durable checkpoint overhead per step", render_durable),
    "durable-concurrency": (
        "Durable steps per second under concurrency",
        render_durable_concurrency,
    ),
}
"""Every section the report renders; a ``docs/comparison.md`` marker names one of these."""
OPTIONAL = ("same-work", "breakdown", "realistic")
"""Sections ``summary.md`` leaves out, naming why, when their figures were not measured
(a ``peers.json`` without the same-work floor, no ``breakdown.json``, neither
``realistic.json`` nor ``realistic_before.json``)."""


def render(name: str, r: Results) -> str:
    """One section's markdown; a missing figure renders as "not measured" with the reason."""
    try:
        return SECTIONS[name][1](r).rstrip("\n")
    except Missing as exc:
        return f"*{NOT_MEASURED}: {exc}*"
    except SHAPE_ERRORS as exc:
        return f"*{NOT_MEASURED}: the JSON is not in the shape this section reads ({_shape(exc)})*"


def summary(r: Results) -> str:
    parts = [
        "# Performance report",
        "",
        "Generated by `benchmarks/report.py` from the JSON in this directory (one "
        "`nox -s bench` run); do not edit by hand. Every ratio is to a floor measured in the "
        "same process (or, for peak RSS, in fresh processes run in turn), as the median of "
        "per-round ratios with their min–max.",
    ]
    left_out = []
    for name, (title, _) in SECTIONS.items():
        text = render(name, r)
        if name in OPTIONAL and text.startswith(f"*{NOT_MEASURED}: "):
            left_out.append(f"- {title}: {text[len(NOT_MEASURED) + 3 : -1]}")
        elif name == "machine":
            parts += ["", text]
        else:
            parts += ["", f"## {title}", "", text]
    sources = []
    for s in SOURCES:
        if s in r.data:
            date = r.data[s].get("date", "no date recorded")
            sources.append(f"- `{s}.json`: {date}{' (quick)' if r.quick(s) else ''}")
        else:
            sources.append(f"- `{s}.json`: {r.why_missing[s]}")
    for s, of in BASELINES.items():
        if s in r.data:
            date = r.data[s].get("date", "no date recorded")
            sources.append(f"- `{s}.json` (baseline of `{of}.json`, kept): {date}")
    parts += ["", "## Sources", "", *sources]
    if left_out:
        parts += ["", "Sections left out, their figures not in these files:", "", *left_out]
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------
# docs/comparison.md markers
# --------------------------------------------------------------------------------------

MARKER = re.compile(r"<!-- (/?)bench:([a-z0-9-]+) -->")


class MarkerError(ValueError):
    """docs/comparison.md's ``<!-- bench:NAME -->`` markers are not well formed."""


def blocks(text: str) -> list[tuple[str, int, int]]:
    """``(name, start of content, end of content)`` of every marker pair, in order.

    Well formed: each ``<!-- bench:NAME -->`` is closed by ``<!-- /bench:NAME -->`` before
    the next opens, each NAME is a section the report renders, and no NAME repeats.
    """
    found: list[tuple[str, int, int]] = []
    open_name: str | None = None
    open_end = 0
    for match in MARKER.finditer(text):
        closing, name = match.group(1) == "/", match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if not closing:
            if open_name is not None:
                raise MarkerError(f"line {line}: bench:{name} opens inside bench:{open_name}")
            if name not in SECTIONS:
                known = ", ".join(SECTIONS)
                raise MarkerError(f"line {line}: no section named {name!r} (known: {known})")
            if any(name == f[0] for f in found):
                raise MarkerError(f"line {line}: bench:{name} appears twice")
            open_name, open_end = name, match.end()
        else:
            if open_name != name:
                raise MarkerError(
                    f"line {line}: /bench:{name} closes "
                    + (f"bench:{open_name}" if open_name else "nothing")
                )
            found.append((name, open_end, match.start()))
            open_name = None
    if open_name is not None:
        raise MarkerError(f"bench:{open_name} is never closed")
    return found


def fill(text: str, r: Results) -> str:
    """``text`` with every marker pair's content replaced by its rendered section."""
    out, last = [], 0
    for name, start, end in blocks(text):
        out += [text[last:start], "\n", render(name, r), "\n"]
        last = end
    out.append(text[last:])
    return "".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--summary", type=Path, default=None, help="(RESULTS/summary.md)")
    parser.add_argument(
        "--docs",
        default=str(ROOT / "docs" / "comparison.md"),
        help="the page whose markers to fill; '-' for none",
    )
    args = parser.parse_args(argv)
    r = Results(args.results)
    if not r.data:
        print(f"no benchmark JSON in {args.results}", file=sys.stderr)
        return 1
    path = args.summary or args.results / "summary.md"
    path.write_text(summary(r))
    print(f"wrote {path}")
    for name, why in r.why_missing.items():
        print(f"note: {name}: {why}")
    if args.docs != "-":
        docs = Path(args.docs)
        try:
            docs.write_text(fill(docs.read_text(), r))
        except MarkerError as exc:
            print(f"{docs}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {docs}")
    print()
    print(render("goals", r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
