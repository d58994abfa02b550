"""The README's and the docs' Python samples pass ``mypy --strict`` and pyright (basic and
strict): the types are part of the API, and a sample a user copies type-checks.

Which samples, and as what program:

* a page whose samples run in order in one namespace (:data:`IN_ORDER`, the pages the
  docs tests run that way) is one program, its samples concatenated; but a sample that
  is a whole program of its own (it calls ``trio.run``) is checked alone;
* on every other page, each sample that imports operative is a program of its own;
* a sample with a top-level ``await`` (``async with``, ``async for``) is checked as the
  body of an ``async def``: the docs run such samples inside a Trio task;
* a sample right after a ``<!-- fragment -->`` line is skipped (an excerpt, or one that
  goes on from a sample of another page).

The checkers run in a temporary directory, outside the checkout, on this checkout's
``operative``; only what they say about the samples counts.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

IN_ORDER = {
    "caching-and-scheduling.md",
    "cancellation.md",
    "context.md",
    "conversation.md",
    "design.md",
    "durable.md",
    "economics.md",
    "extending.md",
    "guardrails.md",
    "live-control.md",
    "mcp.md",
    "multi-agent.md",
    "observability.md",
    "run-store.md",
    "running.md",
    "sessions.md",
    "storage.md",
    "temporal.md",
    "testing.md",
    "tools.md",
    "tutorial.md",
}
"""Pages whose samples the test suite runs top to bottom in one namespace (the docs
tests next to each feature's tests)."""

NOT_YET: set[str] = set()
"""Pages whose samples are not typed yet (none now); a page leaves this set once its
samples pass."""

FRAGMENT = "<!-- fragment -->"
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_WHOLE_PROGRAM = re.compile(r"^trio\.run\(|^if __name__ == .__main__.:", flags=re.MULTILINE)
_IMPORTS_OPERATIVE = re.compile(r"^\s*(import operative|from operative)\b", flags=re.MULTILINE)


def _samples(page: Path) -> Iterator[tuple[int, str]]:
    """``(line, code)`` of each sample of ``page`` that is not marked as a fragment."""
    text = page.read_text()
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if before.strip() == FRAGMENT:
            continue
        yield text[: match.start()].count("\n") + 2, match.group(1)


def _awaits(node: ast.AST) -> bool:
    """Whether ``node`` awaits outside any function it defines (a top-level await)."""
    if isinstance(node, ast.Await | ast.AsyncWith | ast.AsyncFor):
        return True
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return False
    if isinstance(node, ast.comprehension) and node.is_async:
        return True
    return any(_awaits(child) for child in ast.iter_child_nodes(node))


def _program(samples: list[tuple[int, str]]) -> str:
    """The samples as one module; under ``async def`` if one awaits at the top level."""
    source = "".join(code for _, code in samples)
    lines = source.splitlines()
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(source, "sample", "exec", flags=flags, dont_inherit=True)
    head: list[str] = []
    future: list[str] = []
    body: list[str] = []
    for node in tree.body:
        end = node.end_lineno
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        text = lines[start - 1 : end]
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future += [line for line in text if line not in future]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            head += text
        else:
            body += text
    if not any(_awaits(node) for node in tree.body):
        return "\n".join([*future, *head, *body, ""])
    indented = textwrap.indent("\n".join(body), "    ")
    return "\n".join(
        [
            # Its functions and variables are the sample's, local to the wrapper only
            # here: at a module's top level, one that is never used is no mistake.
            "# pyright: reportUnusedFunction=false, reportUnusedVariable=false",
            *future,
            *head,
            "",
            "",
            "async def _sample() -> None:",
            indented,
            "",
        ]
    )


def programs() -> dict[str, str]:
    """Every program to check, by file name (``doc_PAGE.py``, ``doc_PAGE_LINE.py``)."""
    found: dict[str, str] = {}
    for page in PAGES:
        if page.name in NOT_YET:
            continue
        stem = page.stem.replace("-", "_").lower()
        samples = list(_samples(page))
        whole = [(line, code) for line, code in samples if _WHOLE_PROGRAM.search(code)]
        if page.name in IN_ORDER:
            in_order = [sample for sample in samples if sample not in whole]
            if any(_IMPORTS_OPERATIVE.search(code) for _, code in in_order):
                found[f"doc_{stem}.py"] = _program(in_order)
            samples = whole
        for line, code in samples:
            if _IMPORTS_OPERATIVE.search(code):
                found[f"doc_{stem}_{line}.py"] = _program([(line, code)])
    return found


def _where(name: str) -> str:
    """``docs/running.md`` for ``doc_running.py``, ``README.md:117`` for
    ``doc_readme_117.py``."""
    stem = name.removesuffix(".py").removeprefix("doc_")
    for page in PAGES:
        page_stem = page.stem.replace("-", "_").lower()
        where = str(page.relative_to(ROOT))
        if stem == page_stem:
            return where
        if stem.rsplit("_", 1)[0] == page_stem:
            return f"{where}:{stem.rsplit('_', 1)[1]}"
    return name


CONTRACT = """\
# pyright: reportUnnecessaryTypeIgnoreComment=error
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    RunnableAgent,
    create_agent,
    open_run,
)


async def generate(request: GenerateRequest) -> GenerateResponse:
    return GenerateResponse(content="hi")


async def main() -> None:
    agent: RunnableAgent = create_agent(generate=generate)  # an Agent is a RunnableAgent
    result = await agent.run("hi")
    print(result.content)
    chat = Conversation()
    # open_run is typed: each wrong call is an error (an unneeded ignore would be one too).
    open_run(generate=generate, conversation="hi")  # type: ignore[arg-type]
    open_run(generate=generate, conversation=chat, stop_when=3)  # type: ignore[arg-type]
    open_run(generate=generate, conversation=chat, toolbox=[])  # type: ignore[arg-type]
    open_run(generate=generate, conversation=chat, temperature=0.2)  # type: ignore[call-arg]
    await open_run(generate=generate, conversation=chat)  # type: ignore[misc]
    create_agent(generate=generate, instruction="x")  # type: ignore[call-arg]
"""
"""What the types promise beyond the samples: an ``Agent`` is a ``RunnableAgent``
(``run`` is ``async def``), and ``open_run`` refuses what it cannot take."""


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("doc-samples")
    for name, code in programs().items():
        (directory / name).write_text(code)
    (directory / "contract.py").write_text(CONTRACT)
    return directory


def test_there_are_samples_to_check() -> None:
    """The rule finds the README's sample and most of the docs'."""
    found = programs()
    assert any(name.startswith("doc_readme_") for name in found)
    assert len(found) >= 40


def _report(problems: list[tuple[str, str]]) -> str:
    return "\n".join(f"{_where(name)}: {name}:{detail}" for name, detail in problems)


@pytest.mark.heavy  # a minute: three type checker runs over the samples and operative
def test_samples_pass_mypy_strict(sample_dir: Path) -> None:
    """``mypy --strict`` on this checkout's operative (``MYPYPATH``); only what it says
    about the samples counts (operative itself is ``mypy``'s own run)."""
    cache = ROOT / ".mypy_cache" / "doc-samples"
    files = sorted(p.name for p in sample_dir.glob("*.py"))
    done = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict"),
            *("--python-executable", sys.executable, "--cache-dir", str(cache)),
            *files,
        ],
        cwd=sample_dir,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    found = re.findall(r"^((?:doc_\w+|contract)\.py):(\d+: error: .*)$", done.stdout, re.MULTILINE)
    assert not found, _report(found)
    assert "error" not in done.stderr, done.stderr


@pytest.mark.heavy
@pytest.mark.parametrize("mode", ["basic", "strict"])
def test_samples_pass_pyright(sample_dir: Path, mode: str) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    assert pyright is not None, "pyright is in the dev extra: pip install -e '.[dev]'"
    config = {
        "typeCheckingMode": mode,
        "pythonVersion": "3.11",
        "extraPaths": [str(ROOT)],
        "include": ["."],
    }
    (sample_dir / "pyrightconfig.json").write_text(json.dumps(config))
    done = subprocess.run(
        [pyright, "--outputjson", "--pythonpath", sys.executable],
        cwd=sample_dir,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    report = json.loads(done.stdout)
    found = [
        (
            Path(d["file"]).name,
            f"{d['range']['start']['line'] + 1}: {d['message']} ({d.get('rule', '')})",
        )
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert not found, _report(found)
    assert report["summary"]["filesAnalyzed"] >= len(programs())
