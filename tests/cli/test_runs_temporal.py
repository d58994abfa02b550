"""``operative runs list/show/cancel --temporal``: runs on the real Temporal dev server.

A worker runs in the test process; the command runs as it does for a user, through
``main(argv)`` (in a thread, with a Trio run of its own) or as ``python -m operative``.
"""

from __future__ import annotations

import functools
import io
import json
import socket
import sys
from contextlib import aclosing
from typing import Any

import msgspec
import trio
from temporal_tests import conftest as temporal_fixtures
from temporal_tests._agents import hanging_agent, worker_agent
from temporal_tests.conftest import DevServer, start_worker

from operative.cli import main
from operative.durable import ToolStarted
from operative.runstore import RunDetail, RunSummary
from operative.temporal import TemporalEngine

from ._process import ROOT, clean_env

# The dev server and an engine on a task queue of the test's own (tests/temporal_tests).
temporal_server = temporal_fixtures.temporal_server
task_queue = temporal_fixtures.task_queue
engine = temporal_fixtures.engine


def run(*args: str) -> tuple[int, str, str]:
    """The command in this thread: its exit code, standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdin=io.StringIO(), stdout=out, stderr=err, env={})
    return code, out.getvalue(), err.getvalue()


async def command(*args: str) -> tuple[int, str, str]:
    """:func:`run` in a worker thread, so a Temporal worker of this test goes on."""
    return await trio.to_thread.run_sync(functools.partial(run, *args))


async def as_json(*args: str) -> Any:
    code, out, err = await command(*args, "--json")
    assert (code, err) == (0, "")
    return json.loads(out)


def on(engine: TemporalEngine) -> list[str]:
    return ["--temporal", engine.target, "--task-queue", engine.task_queue]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_finished_runs_are_listed_and_shown(engine: TemporalEngine) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        first = await engine.start_run("worker", "steps=2", session_id="s-1")
        await engine.result(first)
        second = await engine.start_run("worker", "steps=1")
        result = await engine.result(second)
        worker.cancel()
    where = on(engine)

    listing = await as_json("runs", "list", *where)
    assert listing["next_cursor"] is None
    runs = msgspec.convert(listing["runs"], list[RunSummary])
    assert [r.run_id for r in runs] == [second, first]  # newest first
    assert [(r.status, r.finish_reason, r.steps) for r in runs] == [
        ("completed", "stop-condition", 2),
        ("completed", "stop-condition", 3),
    ]
    assert runs[1].session_id == "s-1"
    assert runs[0].outcome is not None
    assert runs[0].outcome.content == result.content == "results: done-0"
    session = await as_json("runs", "list", "--session", "s-1", *where)
    assert [r["run_id"] for r in session["runs"]] == [first]
    assert (await as_json("runs", "list", "--status", "running", *where))["runs"] == []
    page = await as_json("runs", "list", "--limit", "1", *where)
    assert [r["run_id"] for r in page["runs"]] == [second]
    assert page["next_cursor"]

    code, out, err = await command("runs", "list", "--limit", "1", *where)
    assert (code, err) == (0, "")
    assert "STATUS" in out
    assert second in out
    assert first not in out
    assert "(more runs: raise --limit above 1)" in out

    detail = msgspec.json.decode(
        (await command("runs", "show", first, *where, "--json"))[1], type=RunDetail
    )
    assert detail.summary.run_id == first
    assert detail.summary.status == "completed"
    assert [(s.step, s.state) for s in detail.steps] == [
        (1, "completed"),
        (2, "completed"),
        (3, "completed"),
    ]
    assert [r.value for s in detail.steps for r in s.results] == ["done-0", "done-1"]
    assert [(c.tool_name, c.outcome) for c in detail.tool_calls] == [("work", "success")] * 2
    roles = [m.role for m in detail.transcript.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    again = await engine.result(first)
    assert detail.transcript.messages[-1].text == again.content

    code, out, err = await command("runs", "show", first, *where)
    assert (code, err) == (0, "")
    assert f"run {first}" in out
    assert "status    completed (stop-condition)" in out
    assert "work: success: done-1" in out
    assert "answer: results: done-0, done-1" in out


async def test_a_run_that_continued_as_new_is_listed_once(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    async with (
        TemporalEngine(
            temporal_server.target, task_queue=engine.task_queue, rollover_events=50
        ) as rolling,
        trio.open_nursery() as nursery,
    ):
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await rolling.start_run("worker", "steps=6")
        await engine.result(run_id)
        worker.cancel()
    executions = temporal_server.cli(
        "workflow", "list", "--query", f"WorkflowId = '{run_id}'", "--output", "json"
    )
    assert len(json.loads(executions)) > 1  # it did continue as new
    for limit in ("20", "1"):
        listing = await as_json("runs", "list", "--limit", limit, *on(engine))
        assert [r["run_id"] for r in listing["runs"]] == [run_id]
        assert listing["runs"][0]["steps"] == 7
        assert listing["next_cursor"] is None
    detail = await as_json("runs", "show", run_id, *on(engine))
    assert [r["value"] for s in detail["steps"] for r in s["results"]] == [
        f"done-{n}" for n in range(6)
    ]


async def test_cancel_reaches_a_run_in_flight(engine: TemporalEngine) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"hanging": hanging_agent()})
        run_id = await engine.start_run("hanging", "go")
        async with aclosing(engine.follow(run_id)) as entries:
            async for entry in entries:
                if isinstance(entry.record, ToolStarted):
                    break
        code, out, err = await command(
            "runs", "cancel", run_id, "--reason", "operator said stop", *on(engine)
        )
        assert (code, err) == (0, "")
        assert f"cancel requested for run {run_id} (operator said stop)" in out
        assert "aborts it within a heartbeat" in out
        result = await engine.result(run_id)
        worker.cancel()
    assert (result.finish_reason, result.abort_reason) == ("aborted", "operator said stop")

    detail = msgspec.json.decode(
        (await command("runs", "show", run_id, *on(engine), "--json"))[1], type=RunDetail
    )
    assert detail.summary.status == "aborted"
    assert detail.summary.cancel_reason == "operator said stop"
    assert [(c.tool_name, c.outcome) for c in detail.tool_calls] == [("wait_forever", "cancelled")]
    code, out, _ = await command("runs", "show", run_id, *on(engine))
    assert "aborted   operator said stop" in out

    code, out, err = await command("runs", "cancel", run_id, *on(engine))
    assert (code, err) == (0, "")
    assert out == f"run {run_id} had ended already: aborted (aborted); nothing to cancel\n"


async def test_a_run_no_worker_took_is_shown_and_cancelled(engine: TemporalEngine) -> None:
    run_id = await engine.start_run("worker", "steps=1", session_id="queued")
    code, out, err = await command("runs", "show", run_id, *on(engine))
    assert (code, err) == (0, "")
    assert "status    running (not finished)" in out
    assert "lease     no worker yet" in out

    record = await as_json("runs", "cancel", run_id, "--reason", "not needed", *on(engine))
    assert (record["status"], record["cancel_reason"]) == ("running", "not needed")
    code, out, _ = await command("runs", "show", run_id, *on(engine))
    assert "cancel    requested: not needed" in out

    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        result = await engine.result(run_id)
        worker.cancel()
    assert result.finish_reason == "aborted"
    detail = msgspec.json.decode(
        (await command("runs", "show", run_id, *on(engine), "--json"))[1], type=RunDetail
    )
    assert (detail.summary.status, detail.summary.session_id) == ("aborted", "queued")
    assert detail.steps == ()
    assert [(m.role, m.text) for m in detail.transcript.messages] == [("user", "steps=1")]
    listed = await as_json("runs", "list", "--status", "aborted", *on(engine))
    assert [r["run_id"] for r in listed["runs"]] == [run_id]


async def test_unknown_runs_and_namespaces_are_one_line_errors(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    for action in ("show", "cancel"):
        code, out, err = await command("runs", action, "no-such-run", *on(engine))
        assert (code, out) == (2, "")
        assert err == (
            f"operative: error: no run 'no-such-run' on Temporal at {engine.target} "
            "(namespace default): list them with `operative runs list --temporal "
            f"{engine.target} --task-queue {engine.task_queue}`\n"
        )
    code, out, err = await command(
        "runs", "list", "--temporal", temporal_server.target, "--namespace", "nowhere"
    )
    assert (code, out) == (2, "")
    assert err.startswith(
        f"operative: error: the Temporal server at {temporal_server.target} has no namespace "
        "'nowhere': pass --namespace NAME"
    )
    assert err.count("\n") == 1


async def test_an_unreachable_server_is_a_one_line_error() -> None:
    target = f"127.0.0.1:{free_port()}"  # nothing listens there
    for args in (["list"], ["show", "some-run"], ["cancel", "some-run"]):
        code, out, err = await command("runs", *args, "--temporal", target)
        assert (code, out) == (2, "")
        assert err.startswith(f"operative: error: cannot connect to Temporal at {target}: ")
        assert "Connection refused" in err
        assert err.endswith("or pass another --temporal HOST:PORT\n")
        assert err.count("\n") == 1
    done = await trio.run_process(
        [sys.executable, "-m", "operative", "runs", "list", "--temporal", target],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=clean_env(),
        cwd=ROOT,
    )
    stderr = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b"")
    assert stderr.startswith(f"operative: error: cannot connect to Temporal at {target}: ")
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1


def test_recover_refuses_temporal_and_flags_that_do_not_fit() -> None:
    code, out, err = run("recover", "--offline", "--temporal", "127.0.0.1:7233")
    assert (code, out) == (2, "")
    assert "Temporal dispatches its runs itself" in err
    assert "serve_temporal_worker" in err
    code, _, err = run("runs", "list", "--namespace", "prod")
    assert code == 2
    assert "--namespace goes with --temporal HOST:PORT" in err
    code, _, err = run("runs", "list", "--temporal", "127.0.0.1:7233", "--data-dir", "/tmp")
    assert code == 2
    assert "--temporal and --data-dir" in err
    code, _, err = run("runs", "cancel", "r", "--temporal", "127.0.0.1:7233", "--reason", " ")
    assert code == 2
    assert "--reason takes" in err
