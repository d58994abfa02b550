"""What one ``agent.run`` crosses: the files, functions and calls of operative's own
code from ``await agent.run(...)`` to its result, with and without a listener.

The run is two steps (a tool call, then the answer) of a model that builds its
responses, the way ``docs/design.md`` ("One run's path") reads it. Counted: every Python
function of ``operative/`` entered (``sys.setprofile``), except the scripted model and
the tool itself (the user's code); ``calls`` counts entries, ``functions`` distinct
functions, ``files`` distinct modules. "With a listener" attaches one ``"*"`` listener
in an ``agent.open_run`` block (``run.add_listener("*", ...)``, then ``run.result()``),
the way a caller listens.

Usage::

    .venv/bin/python benchmarks/trace_run.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from typing import Any

import trio

import operative
from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent, tool

ROOT = os.path.dirname(operative.__file__)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def model(request: GenerateRequest) -> GenerateResponse:
    """Step 1 calls ``add``; step 2 answers."""
    if request.step == 1:
        return GenerateResponse(
            tool_calls=(ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2}),)
        )
    return GenerateResponse(content="3")


def trace(listen: bool) -> dict[str, Any]:
    """Run once untraced (imports, caches), then once traced; what the traced run crossed."""
    agent = create_agent(generate=model, tools=[add])
    seen: Counter[tuple[str, str]] = Counter()
    skip = {model.__code__, add.fn.__code__ if hasattr(add, "fn") else None}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code in skip or not code.co_filename.startswith(ROOT):
            return
        seen[(os.path.relpath(code.co_filename, ROOT), code.co_qualname)] += 1

    async def listened() -> Any:
        async with agent.open_run("what is 1 + 2?") as run:
            run.add_listener("*", lambda event: None)
            return await run.result()

    async def main(traced: bool) -> None:
        if traced:
            sys.setprofile(profile)
        try:
            result = await (listened() if listen else agent.run("what is 1 + 2?"))
        finally:
            sys.setprofile(None)
        assert result.content == "3"

    trio.run(main, False)
    trio.run(main, True)
    files = sorted({path for path, _ in seen})
    return {
        "files": len(files),
        "functions": len(seen),
        "calls": sum(seen.values()),
        "by_file": {f: sorted(name for path, name in seen if path == f) for f in files},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    results = {"without_listener": trace(False), "with_listener": trace(True)}
    for name, figures in results.items():
        counts = (figures["files"], figures["functions"], figures["calls"])
        print(f"{name}: {counts[0]} files, {counts[1]} functions, {counts[2]} calls")
        for path, names in figures["by_file"].items():
            print(f"  {path}: {', '.join(names)}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
