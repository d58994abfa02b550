"""The operative command, in process through main(argv) and as ``python -m operative``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from operative import GenerateRequest, GenerateResponse
from operative.cli import main
from operative.cli._agents import (
    CHAT_AGENT,
    DEMO_AGENT,
    chat_agent,
    demo_agent,
    offline_generate,
)
from operative.cli._errors import UsageError
from operative.cli._inspect import parse_since
from operative.cli._models import choose_model
from operative.cli._output import Output
from operative.cli._state import open_state
from operative.durable import Durable
from operative.sessions import open_session
from operative.testing import HANG, ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
NO_KEYS: dict[str, str] = {}


def run(
    args: list[str], stdin: str = "", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        args, stdin=io.StringIO(stdin), stdout=out, stderr=err, env=NO_KEYS if env is None else env
    )
    return code, out.getvalue(), err.getvalue()


def as_json(args: list[str]) -> Any:
    code, out, err = run([*args, "--json"])
    assert code == 0, err
    return json.loads(out)


def test_demo_runs_offline_and_exits_0(tmp_path: Path) -> None:
    """With no API key the demo uses the labelled offline model, calls tools and answers."""
    code, out, err = run(["demo", "--data-dir", str(tmp_path)])
    assert code == 0, err
    assert "OFFLINE scripted model" in out
    assert "no ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL is set" in out
    assert "→ get_weather(city='Lisbon')" in out
    assert "← calculate: success: 17 * 23 + 4 = 395" in out
    assert "answer: " in out
    assert "395" in out
    assert (tmp_path / "operative.db").exists()


def test_python_dash_m_operative_demo_offline(tmp_path: Path) -> None:
    """``python -m operative demo --offline`` works in a fresh process, whatever keys are set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPERATIVE_", "OPENAI_"))}
    env["ANTHROPIC_API_KEY"] = "sk-not-used"
    completed = subprocess.run(
        [sys.executable, "-m", "operative", "demo", "--offline", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "model: OFFLINE scripted model" in completed.stdout
    assert "answer: " in completed.stdout


def test_chat_by_piped_stdin_with_approvals(tmp_path: Path) -> None:
    """Two turns: one approval answered y (the note is saved), one n (it is not)."""
    data = ["--data-dir", str(tmp_path)]
    lines = "remember to buy milk\ny\nremember to call Bob\nn\n"
    code, out, err = run(["chat", "--model", "offline", "--session", "notes", *data], lines)
    assert code == 0, err
    assert out.count("approve save_note(") == 2
    assert "← save_note: success" in out
    assert "← save_note: denied" in out
    assert "assistant: I did not run save_note" in out  # the reply streamed as deltas
    assert (tmp_path / "notes.txt").read_text() == "buy milk\n"
    session = as_json(["sessions", "show", "notes", *data])
    assert session["agent_name"] == CHAT_AGENT
    assert [r["outcome"]["finish_reason"] for r in session["runs"]] == ["stop-condition"] * 2
    runs = as_json(["runs", "list", "--session", "notes", *data])["runs"]
    assert len(runs) == 2
    assert {r["status"] for r in runs} == {"completed"}


def test_chat_quits_on_slash_quit_and_a_missing_answer_denies(tmp_path: Path) -> None:
    """/quit ends the chat; end of input at an approval prompt denies the call."""
    data = ["--data-dir", str(tmp_path)]
    code, out, _ = run(["chat", "--offline", *data], "/quit\nnever read\n")
    assert code == 0
    assert "you> /quit" in out
    code, out, _ = run(["chat", "--offline", *data], "remember the keys\n")
    assert code == 0
    assert "nobody answered (end of input)" in out
    assert not (tmp_path / "notes.txt").exists()


def test_chat_refuses_a_session_of_another_agent(tmp_path: Path) -> None:
    """Continuing the demo's session in chat is a usage error that says what to do."""
    data = ["--data-dir", str(tmp_path)]
    assert run(["demo", *data])[0] == 0
    code, _, err = run(["chat", "--offline", "--session", "demo", *data], "hi\n")
    assert code == 2
    assert "belongs to the agent 'operative-demo'" in err
    assert "pick another --session" in err


def test_runs_and_sessions_listings_as_json(tmp_path: Path) -> None:
    """Listings decode as one JSON document and honour their filters."""
    data = ["--data-dir", str(tmp_path)]
    assert run(["demo", *data])[0] == 0
    assert run(["chat", "--offline", "--session", "c", *data], "what is 6 * 7\n")[0] == 0
    runs = as_json(["runs", "list", *data])
    assert runs["next_cursor"] is None
    assert {r["agent_name"] for r in runs["runs"]} == {DEMO_AGENT, CHAT_AGENT}
    only = as_json(["runs", "list", "--agent", DEMO_AGENT, "--status", "completed", *data])
    assert [r["session_id"] for r in only["runs"]] == ["demo"]
    assert as_json(["runs", "list", "--since", "1h", "--limit", "1", *data])["next_cursor"]
    assert as_json(["runs", "list", "--status", "running", *data])["runs"] == []
    detail = as_json(["runs", "show", only["runs"][0]["run_id"], *data])
    assert [c["tool_name"] for c in detail["tool_calls"]].count("calculate") == 1
    sessions = as_json(["sessions", "list", *data])["sessions"]
    assert sorted(s["id"] for s in sessions) == ["c", "demo"]
    code, out, _ = run(["runs", "list", *data])
    assert code == 0
    assert "operative-demo" in out
    assert "STATUS" in out
    code, out, _ = run(["sessions", "list", *data])
    assert code == 0
    assert "MESSAGES" in out


def test_unknown_ids_exit_2_with_a_clear_message(tmp_path: Path) -> None:
    """show or delete of an id nobody stored says so, and how to list what exists."""
    data = ["--data-dir", str(tmp_path)]
    for args in (["runs", "show", "run_nope"], ["sessions", "show", "nope"]):
        code, out, err = run([*args, *data])
        assert (code, out) == (2, "")
        assert "list them with `operative" in err
    assert run(["demo", *data])[0] == 0
    code, _, err = run(["runs", "show", "run_nope", *data])
    assert code == 2
    assert "no run 'run_nope'" in err
    assert run(["sessions", "delete", "demo", *data])[:2] == (0, "deleted session 'demo'\n")
    assert run(["sessions", "delete", "demo", *data])[0] == 2


def test_listings_of_an_empty_data_dir_create_nothing(tmp_path: Path) -> None:
    """Listing a directory that holds nothing yet prints empty results and writes no file."""
    data = ["--data-dir", str(tmp_path / "fresh")]
    assert as_json(["runs", "list", *data]) == {"runs": [], "next_cursor": None}
    assert as_json(["sessions", "list", *data]) == {"sessions": []}
    assert run(["recover", "--offline", *data])[1].startswith("nothing to recover")
    assert not (tmp_path / "fresh").exists()


def test_usage_errors_exit_2() -> None:
    """Bad arguments exit 2 with the reason; --help exits 0."""
    code, _, err = run(["runs", "list", "--since", "yesterday"])
    assert code == 2
    assert "--since 'yesterday'" in err
    code, _, err = run(["demo", "--model", "acme:fast"])
    assert code == 2
    assert "the provider must be one of" in err
    code, _, err = run([])
    assert code == 2
    assert "the following arguments are required" in err
    code, _, err = run(["runs", "list", "--limit", "0"])
    assert code == 2
    assert "--limit" in err
    assert run(["--help"])[0] == 0


def test_an_empty_data_dir_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--data-dir ''`` is refused (it is not taken as the current directory)."""
    monkeypatch.chdir(tmp_path)
    for command in (["runs", "list"], ["demo", "--offline"], ["sessions", "list"]):
        code, out, err = run([*command, "--data-dir", ""])
        assert code == 2
        assert "--data-dir: '' is not a directory: give a path" in err
        assert out == ""
    assert list(tmp_path.iterdir()) == []


def test_chat_says_who_holds_an_interrupted_turn(tmp_path: Path) -> None:
    """A chat turn another worker still holds is not resumed: the chat says whose it is
    and until when, and goes on."""

    async def interrupt() -> str:
        shutdown = trio.CancelScope()

        async def stops(request: GenerateRequest) -> GenerateResponse:
            shutdown.cancel()
            return await ScriptedModel([HANG])(request)

        async with open_state(tmp_path) as state:
            async with open_session(
                "held",
                store=state.sessions,
                agent=chat_agent(stops, approver=None, notes=state.notes),
                durable=state.durable,
            ) as session:
                with shutdown:
                    await session.run("remember the milk")
                turn = session.session.runs[-1].run_id
            await state.engine.claim(worker_id="worker-b", lease_seconds=600, run_ids=[turn])
            return turn

    turn = trio.run(interrupt)
    data = ["--data-dir", str(tmp_path)]
    code, out, err = run(["chat", "--offline", "--session", "held", *data], stdin="/quit\n")
    assert code == 0, err
    assert f"the interrupted turn {turn} is held by worker-b until" in out
    assert "if that process stopped, run `operative recover --data-dir" in out
    code, out, err = run(["recover", "--offline", *data])
    assert code == 0, err
    assert f"still running: {turn} ({CHAT_AGENT}), held by worker-b" in out


def test_model_choice_follows_the_environment() -> None:
    """Keys pick a provider; --offline wins; OPENAI_BASE_URL means an OpenAI-compatible server."""
    assert choose_model(None, offline=False, env={}).offline
    anthropic = choose_model(None, offline=False, env={"ANTHROPIC_API_KEY": "k"})
    assert (anthropic.provider, anthropic.model) == ("anthropic", "claude-haiku-4-5")
    local = choose_model(
        None,
        offline=False,
        env={"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "OPERATIVE_MODEL": "qwen3"},
    )
    assert (local.provider, local.model, local.base_url) == (
        "openai",
        "qwen3",
        "http://127.0.0.1:8080/v1",
    )
    assert "127.0.0.1:8080" in local.label
    assert choose_model(None, offline=True, env={"ANTHROPIC_API_KEY": "k"}).offline
    assert choose_model("ollama:llama3.2", offline=False, env={}).model == "llama3.2"
    with pytest.raises(UsageError, match="name the model"):
        choose_model("ollama", offline=False, env={})


def test_parse_since() -> None:
    """Durations count back from now; ISO times are absolute."""
    assert parse_since("90s", now=1000.0) == 910.0
    assert parse_since("2h", now=10_000.0) == 2_800.0
    assert parse_since("PT1M", now=100.0) == 40.0
    assert parse_since("2026-01-01T00:00:00+00:00") == 1767225600.0


def test_rich_colours_a_terminal_and_is_never_needed() -> None:
    """With colour on, lines go through rich; off, they are plain text."""
    buffer = io.StringIO()
    Output(buffer, io.StringIO(), color=True).line("hello", "bold")
    assert "hello" in buffer.getvalue()
    plain = io.StringIO()
    out = Output(plain, io.StringIO(), color=False)
    out.line("hello", "bold")
    assert not out.rich
    assert plain.getvalue() == "hello\n"


def test_import_operative_imports_neither_the_command_nor_rich() -> None:
    """The command and rich load only when the command runs."""
    code = "import operative, sys; print('operative.cli' in sys.modules, 'rich' in sys.modules)"
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert completed.stdout.split() == ["False", "False"]


@pytest.mark.heavy  # real command processes, interrupted then recovered: seconds
def test_recover_finishes_interrupted_runs(tmp_path: Path) -> None:
    """A session turn and a plain durable run left by a stopped process are finished."""

    async def interrupt() -> tuple[str, str]:
        shutdown = trio.CancelScope()

        async def stops(request: GenerateRequest) -> GenerateResponse:
            shutdown.cancel()
            return await ScriptedModel([HANG])(request)

        async with open_state(tmp_path) as state:
            async with open_session(
                "crashed",
                store=state.sessions,
                agent_name=DEMO_AGENT,
                agent=demo_agent(stops),
                durable=state.durable,
            ) as session:
                with shutdown:
                    await session.run("What is the weather in Porto?")
                turn = session.session.runs[-1].run_id
            durable = Durable(state.durable)
            with trio.move_on_after(5):
                async with demo_agent(stops).open_run("what is 2 + 2", durable=durable) as run:
                    await run.wait_durably_started()
            assert (await state.engine.get(run.run_id)).status == "running"  # type: ignore[union-attr]
            return turn, run.run_id

    turn, plain = trio.run(interrupt)
    data = ["--data-dir", str(tmp_path)]
    assert {
        r["run_id"] for r in as_json(["runs", "list", "--status", "running", *data])["runs"]
    } == {
        turn,
        plain,
    }
    code, out, err = run(["recover", "--offline", *data])
    assert code == 0, err
    assert f"resumed {turn} (session 'crashed'): stop-condition: Porto:" in out
    assert f"resumed {plain}: stop-condition: 2 + 2 = 4." in out
    assert "resumed 2 run(s)" in out
    assert as_json(["runs", "list", "--status", "running", *data])["runs"] == []
    session = as_json(["sessions", "show", "crashed", *data])
    assert session["runs"][-1]["outcome"]["finish_reason"] == "stop-condition"
    again = as_json(["recover", "--offline", *data])
    assert again == {"resumed": [], "still_running": []}


def test_offline_model_is_a_function_of_the_conversation() -> None:
    """The same conversation gets the same answer, so a recovered run goes on as it would."""
    from operative import Conversation

    conversation = Conversation()
    conversation.append_user_message("weather in Oslo and 2 ** 10?")
    request = GenerateRequest(conversation=conversation.current, tools=(), step=1, run_id="r")

    async def twice() -> tuple[GenerateResponse, GenerateResponse]:
        return await offline_generate(request), await offline_generate(request)

    first, second = trio.run(twice)
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
