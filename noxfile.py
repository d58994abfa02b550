"""Every check the project runs: ``nox -s tests lint typecheck docs`` (and ``bench``)."""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "docs"]
nox.options.reuse_existing_virtualenvs = True

PEERS = [
    "pydantic-ai-slim",
    "openai-agents",
    "langgraph",
    "langchain-core",
    "langgraph-checkpoint-sqlite",
    "matplotlib",
]
"""What ``benchmarks/bench_peers.py`` compares operative with (bench session only)."""

SOURCES = ["operative", "tests", "benchmarks", "examples", "noxfile.py"]


@nox.session
def tests(session: nox.Session) -> None:
    """The fast gate, no service needed (``nox -s tests -- --full``: the full suite)."""
    session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff format (check only) and ruff check."""
    session.install("ruff")
    session.run("ruff", "format", "--check", *SOURCES)
    session.run("ruff", "check", *SOURCES)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package and the tests."""
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the docs site (any warning fails the build), then open its key pages in
    headless Chromium at 1200 px, screenshot them and check them (tests/test_docs_site.py:
    the header is one row, code is highlighted, dark mode and search work).

    Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium
    chromium-driver``); without them the session fails.
    """
    session.install("-e", ".[dev]")
    tmp = session.create_tmp()
    site, screenshots = f"{tmp}/site", f"{tmp}/screenshots"
    quiet = {"NO_MKDOCS_2_WARNING": "1"}
    session.run("mkdocs", "build", "--strict", "--site-dir", site, env=quiet)
    session.run(
        "python",
        "-m",
        "pytest",
        "tests/test_docs_site.py",
        "-p",
        "no:cacheprovider",
        env={
            "OPERATIVE_DOCS_SITE": site,
            "OPERATIVE_DOCS_SCREENSHOTS": screenshots,
            "OPERATIVE_REQUIRE_CHROMIUM": "1",
        },
    )
    session.log(f"screenshots of the key pages: {screenshots}")


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks, reported as ratios to a bare Trio loop, and the peers compared.

    Each script that reports figures writes ``benchmarks/results/<name>.json``; then
    ``benchmarks/report.py`` renders ``benchmarks/results/summary.md`` and the figures of
    ``docs/comparison.md`` from those files, so every published figure comes from this
    one run. ``nox -s bench -- --quick`` is a smoke run: every script in its quick mode,
    the JSON, the summary and a copy of the page written to a temporary directory (the
    published results are left alone). Other arguments go to ``bench_loop.py``.
    """
    # The peer frameworks are installed here only, never in the project's own environment.
    session.install("-e", ".[dev]", *PEERS)
    quick = "--quick" in session.posargs
    loop_args = [a for a in session.posargs if a != "--quick"]
    smoke = ["--quick"] if quick else []
    if quick:
        results = os.path.join(session.create_tmp(), "results")
        os.makedirs(results, exist_ok=True)
        docs = os.path.join(results, "comparison.md")
        shutil.copyfile("docs/comparison.md", docs)
    else:
        results, docs = "benchmarks/results", "docs/comparison.md"

    def out(name: str, suffix: str = "json") -> str:
        return os.path.join(results, f"{name}.{suffix}")

    session.run("python", "benchmarks/bench_loop.py", *smoke, "--json", out("loop"), *loop_args)
    session.run("python", "benchmarks/bench_codec.py", *smoke)
    session.run("python", "benchmarks/bench_providers.py", *smoke)
    session.run("python", "benchmarks/bench_durable.py", *smoke, "--json", out("durable"))
    # Instructions too (valgrind, when installed): the one import figure a loaded
    # machine does not move; the time ratios swing by half between rounds.
    counted = [] if quick else ["--instructions"]
    session.run("python", "benchmarks/bench_import.py", *smoke, *counted, "--json", out("import"))
    session.run(
        "python",
        "benchmarks/bench_temporal.py",
        *smoke,
        "--json",
        out("temporal"),
        "--markdown",
        out("temporal", "md"),
    )
    session.run("python", "benchmarks/bench_instrumentation.py", *smoke)
    session.run(
        "python",
        "benchmarks/bench_peers.py",
        *smoke,
        *counted,  # the 2,000-run batch under virtual time, counted by valgrind
        "--json",
        out("peers"),
        "--markdown",
        out("peers", "md"),
        "--plot",
        out("peers", "png"),
    )
    # The cost ledger: one-step run and marginal step split into components, with
    # instruction counts (callgrind) when valgrind is installed.
    session.run("python", "benchmarks/bench_breakdown.py", *smoke, "--json", out("breakdown"))
    # The realistic-adapter variant: every model builds its responses each step; the guard
    # for one run, one path (results/realistic_before.json is its baseline, kept).
    session.run("python", "benchmarks/bench_realistic.py", *smoke, "--json", out("realistic"))
    session.run("python", "benchmarks/report.py", "--results", results, "--docs", docs)
