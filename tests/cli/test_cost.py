"""Cost is reported one way by every command: dollars when every token has a price,
otherwise ``n/a`` with the reason; never ``$0.0000`` for what has no price."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from ._fake_openai import Answer, Failure, open_fake_openai
from ._process import clean_env, operative

RUN_ID = re.compile(r"durable run (run_\w+)")


def final_cost(demo_output: str) -> str:
    """The cost the demo's summary line gives."""
    found = re.search(r"tokens, cost (.*); durable run", demo_output)
    assert found is not None, demo_output
    return found.group(1)


def shown_cost(data_dir: Path, run_id: str) -> str:
    """The cost ``runs show`` gives for the run."""
    done = operative("runs", "show", run_id, "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    found = re.search(r"tokens, cost (.*)$", done.stdout, flags=re.MULTILINE)
    assert found is not None, done.stdout
    return found.group(1)


def test_the_offline_model_is_unpriced_everywhere(tmp_path: Path) -> None:
    """demo, runs show and runs list say n/a, and why, for the offline stand-in."""
    data = ["--data-dir", str(tmp_path)]
    demo = operative("demo", "--offline", *data)
    assert demo.returncode == 0, demo.stderr
    reason = "n/a (the offline stand-in has no price)"
    assert final_cost(demo.stdout) == reason
    assert demo.stdout.count(f"out tokens, cost {reason}") == 2  # each model call
    run_id = RUN_ID.search(demo.stdout).group(1)  # type: ignore[union-attr]
    assert shown_cost(tmp_path, run_id) == reason
    listing = operative("runs", "list", *data).stdout
    row = next(line for line in listing.splitlines() if line.startswith(run_id))
    assert " n/a " in row
    assert "(cost n/a: the offline stand-in has no price)" in listing
    assert "$" not in demo.stdout + listing


@pytest.mark.heavy  # real command processes against a fake provider: seconds
async def test_a_failed_run_and_a_priced_run_agree_with_runs_show(tmp_path: Path) -> None:
    """A run no model answered is n/a (no tokens were reported), not $0.0000; a priced
    model's run costs the same in demo's summary as in runs show."""
    async with open_fake_openai() as server:
        env = clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=server.url)
        data = ["--data-dir", str(tmp_path)]

        def demo() -> str:
            done = operative("demo", "--model", "openai:gpt-4o-mini", *data, env=env)
            assert done.returncode in (0, 1), done.stderr
            return done.stdout

        server.replies.append(Failure(status=400, message="no such model"))
        failed = await trio.to_thread.run_sync(demo)
        server.replies.append(
            Answer(
                pieces=("Sunny.",),
                model="gpt-4o-mini",
                prompt_tokens=100_000,
                completion_tokens=50_000,
            )
        )
        priced = await trio.to_thread.run_sync(demo)
    assert final_cost(failed) == "n/a (no tokens were reported)"
    failed_id = RUN_ID.search(failed).group(1)  # type: ignore[union-attr]
    assert shown_cost(tmp_path, failed_id) == "n/a (no tokens were reported)"
    assert final_cost(priced) == "$0.0450"
    priced_id = RUN_ID.search(priced).group(1)  # type: ignore[union-attr]
    assert shown_cost(tmp_path, priced_id) == "$0.0450"
    listing = operative("runs", "list", "--data-dir", str(tmp_path)).stdout
    assert "(cost n/a: no tokens were reported)" in listing
    assert "$0.0000" not in failed + priced + listing


async def test_estimated_usage_is_shown_as_an_estimate(tmp_path: Path) -> None:
    """A server that reports no usage gets estimated tokens, shown as ~N (estimated) by
    demo and runs show alike, never as a count of zero."""
    async with open_fake_openai() as server:
        server.replies.append(Answer(pieces=("It is sunny in Lisbon today.",), usage=False))
        env = clean_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=server.url)
        done = await trio.to_thread.run_sync(
            lambda: operative(
                "demo", "--model", "openai:gpt-test", "--data-dir", str(tmp_path), env=env
            )
        )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("  model gpt-test: "))
    assert re.match(r"  model gpt-test: ~\d+ in, ~\d+ out \(estimated\) tokens, cost ", line)
    assert re.search(r"1 steps, ~\d+ tokens, cost ", done.stdout)
    run_id = RUN_ID.search(done.stdout).group(1)  # type: ignore[union-attr]
    shown = operative("runs", "show", run_id, "--data-dir", str(tmp_path)).stdout
    assert re.search(r"usage     ~\d+ tokens", shown)
