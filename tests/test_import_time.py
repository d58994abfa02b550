"""``import operative`` stays light: optional machinery loads on first use, and works then.

Each check runs in a fresh interpreter, since this test process has imported most of
operative already. No timing is asserted (``benchmarks/bench_import.py`` reports it):
the tests check *what* a plain import loads, and that each deferred part loads and
works when it is first used.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NOT_LOADED_BY_IMPORT = (
    # providers and their SDKs
    "operative.providers",
    "httpx",
    "anthropic",
    "openai",
    # durable runs, storage, SQL
    "operative.durable",
    "operative.runstore",
    "operative.sessions",
    "operative._sql",
    "operative.kvstore._sqlite",
    "operative.kvstore._postgres",
    "sqlite3",
    "psycopg",
    # validation and schema machinery only failures or unusual types need
    "cattrs",
    "operative._core._convert",
    "operative._core._locate",
    "jsonschema",
    "json",
    # instrumentation, liveness extras, optional subsystems
    "opentelemetry",
    "operative.instrumentation",
    "operative.liveness._diagnostic",
    "operative.liveness._heartbeat",
    "operative.multiagent",
    "operative.budgets",
    "operative.context",
    "operative.steering",
    "operative.cli",
    "operative.testing",
    "importlib.metadata",
    # what only some runs use: a caller's per-run context, approvals and permission
    # policies, elicitation, the stall watchdog, retries, key-value stores
    "operative._agent_context",
    "operative.tools._approvals",
    "operative.tools._elicitation",
    "operative.tools._permissions",
    "operative.liveness._watchdog",
    "operative.retry",
    "operative.kvstore",
)

# Loaded on first use since ``import operative`` stopped loading them; they were bound
# at import before, so ``dir()`` still lists them.
DEFERRED_FOR_A_PLAIN_RUN = (
    "operative._agent_context",
    "operative.tools._approvals",
    "operative.tools._elicitation",
    "operative.tools._permissions",
    "operative.liveness._watchdog",
    "operative.retry",
    "operative.kvstore",
)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plain_import_loads_no_optional_machinery() -> None:
    """``import operative`` imports none of the modules a plain run does not need."""
    out = _run(
        f"""
        import sys
        import operative
        print(sorted(m for m in {NOT_LOADED_BY_IMPORT!r} if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    """Each name of ``operative.__all__`` resolves from a fresh ``import operative``."""
    out = _run(
        """
        import operative
        missing = [n for n in operative.__all__ if getattr(operative, n, None) is None]
        print(missing)
        """
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("statement", "loads"),
    [
        ("from operative.kvstore import SqliteStore", "operative.kvstore._sqlite"),
        ("from operative.kvstore import SqliteStore", "sqlite3"),
        ("from operative.kvstore import PostgresStore", "operative._sql"),
        ("operative.kvstore.PostgresStore", "operative.kvstore._postgres"),
        (
            "from operative.liveness import Heartbeat, serve_heartbeat",
            "operative.liveness._heartbeat",
        ),
        ("from operative.liveness import DiagnosticRun", "operative.liveness._diagnostic"),
        ("from operative.liveness import open_diagnostic_run", "operative.liveness._diagnostic"),
    ],
)
def test_a_deferred_name_loads_on_first_use(statement: str, loads: str) -> None:
    """Naming a deferred feature loads its module, and gives the same object as a direct import."""
    out = _run(
        f"""
        import sys
        import operative
        import operative.kvstore
        assert {loads!r} not in sys.modules
        {statement}
        print({loads!r} in sys.modules)
        """
    )
    assert out.strip() == "True"


@pytest.mark.parametrize(
    ("statement", "loads"),
    [
        ("from operative import AgentRunContext", "operative._agent_context"),
        ("operative.AgentRunContext", "operative._agent_context"),
        ("from operative._agent import AgentRunContext", "operative._agent_context"),
        ("from operative.tools import ApprovalPolicy", "operative.tools._approvals"),
        ("from operative.tools import ApprovalMode", "operative.tools._approvals"),
        ("from operative.tools import argument_digest", "operative.tools._approvals"),
        ("operative.tools.PermissionPolicy", "operative.tools._permissions"),
        ("from operative.tools import ElicitationRequest", "operative.tools._elicitation"),
        ("from operative.tools import OnElicitation", "operative.tools._elicitation"),
        ("from operative.tools import PermissionPolicy", "operative.tools._permissions"),
        ("from operative.liveness import StallPolicy", "operative.liveness._watchdog"),
        ("from operative.liveness import StallWatchdog", "operative.liveness._watchdog"),
        ("from operative.retry import RetryOptions", "operative.retry"),
        ("from operative.kvstore import MemoryStore", "operative.kvstore"),
        ("from operative.kvstore import ConditionalTextValueStore", "operative.kvstore"),
    ],
)
def test_a_name_a_plain_run_does_not_need_loads_on_first_use(statement: str, loads: str) -> None:
    """Naming what a plain run does not need loads its module then, and gives the very
    object the module defines (through ``operative`` or its subpackage)."""
    out = _run(
        f"""
        import sys
        import operative
        assert {loads!r} not in sys.modules
        {statement}
        print({loads!r} in sys.modules)
        import operative._agent, operative.kvstore, operative.liveness, operative.retry
        import operative.tools
        from operative._agent_context import AgentRunContext
        from operative.kvstore._memory import MemoryStore
        from operative.liveness._watchdog import StallPolicy, StallWatchdog
        from operative.tools._approvals import ApprovalPolicy, argument_digest
        from operative.tools._elicitation import ElicitationResponse
        from operative.tools._permissions import PermissionPolicy
        assert operative.AgentRunContext is operative._agent.AgentRunContext is AgentRunContext
        assert operative.tools.ApprovalPolicy is ApprovalPolicy
        assert operative.tools.argument_digest is argument_digest
        assert operative.tools.ElicitationResponse is ElicitationResponse
        assert operative.tools.PermissionPolicy is PermissionPolicy
        assert operative.liveness.StallPolicy is StallPolicy
        assert operative.liveness.StallWatchdog is StallWatchdog
        assert operative.kvstore.MemoryStore is MemoryStore
        """
    )
    assert out.strip() == "True"


def test_dir_lists_the_deferred_names_before_they_load() -> None:
    """``dir()`` of ``operative``, ``operative.tools`` and ``operative.liveness`` is the
    same before and after the deferred names load, and lists them."""
    out = _run(
        """
        import sys
        from inspect import ismodule
        import operative, operative.liveness, operative.tools

        modules = (operative, operative.tools, operative.liveness)
        before = [dir(m) for m in modules]
        assert "operative.retry" not in sys.modules
        for module, names in zip(modules, (
            ("AgentRunContext", "RunOptions", "create_lazy_agent", "create_lazy_generate"),
            ("ApprovalDecider", "ApprovalMode", "ApprovalPolicy", "PermissionPolicy",
             "argument_digest", "ElicitationRequest", "ElicitationResponse", "OnElicitation"),
            ("StallPolicy", "StallWatchdog"),
        )):
            for name in names:
                getattr(module, name)
        # (a submodule loaded meanwhile becomes an attribute, as any import makes it)
        after = [
            [n for n in dir(m) if n in b or not (n[:1] == "_" or ismodule(getattr(m, n)))]
            for m, b in zip(modules, before)
        ]
        print(before == after)
        print(all(n in before[0] for n in ("AgentRunContext", "RunOptions",
            "create_lazy_agent", "create_lazy_generate")))
        print(all(n in before[1] for n in ("ApprovalDecider", "ApprovalMode", "ApprovalPolicy",
            "PermissionPolicy", "argument_digest", "ElicitationRequest", "ElicitationResponse",
            "OnElicitation")))
        print(all(n in before[2] for n in ("StallPolicy", "StallWatchdog")))
        """
    )
    assert out.split() == ["True", "True", "True", "True"]


def test_a_plain_run_with_a_toolbox_loads_none_of_the_deferred_modules() -> None:
    """``create_agent`` with a generate function and a Toolbox, run to its end with a
    tool call, loads no module a plain ``import operative`` deferred."""
    out = _run(
        f"""
        import sys
        import trio
        from operative import GenerateResponse, ToolCall, Toolbox, create_agent, tool

        @tool
        def add(a: int, b: int) -> int:
            \"\"\"Add two numbers.\"\"\"
            return a + b

        async def generate(request):
            if request.step == 1:
                call = ToolCall(id="c1", name="add", arguments={{"a": 1, "b": 2}})
                return GenerateResponse(tool_calls=[call])
            return GenerateResponse(content="done")

        agent = create_agent(generate=generate, toolbox=Toolbox([add]), instructions="Add.")
        result = trio.run(agent.run, "1 + 2?")
        print(result.content, [r.value for s in result.steps for r in s.results])
        print(sorted(m for m in {DEFERRED_FOR_A_PLAIN_RUN!r} if m in sys.modules))
        """
    )
    assert out.split("\n")[:2] == ["done [3]", "[]"]


def test_approvals_load_when_a_call_first_parks_and_then_work() -> None:
    """A toolbox whose tool needs approval makes its approvals (and loads the machinery)
    only when a call first parks; the signed approval then resumes the call, once."""
    out = _run(
        """
        import sys
        import trio
        from operative import ToolCall, Toolbox, tool
        from operative.tools import ApprovalError

        ran = []

        @tool(needs_approval=True)
        def pay(amount: int) -> str:
            \"\"\"Pay an amount.\"\"\"
            ran.append(amount)
            return f"paid {amount}"

        box = Toolbox([pay])
        print("operative.tools._approvals" in sys.modules)

        async def main():
            parked = await box.execute(ToolCall(id="c1", name="pay", arguments={"amount": 5}))
            print(parked.outcome, ran, "operative.tools._approvals" in sys.modules)
            done = await box.resume_approval(parked.pending_approval)
            print(done.outcome, done.value, ran)
            try:
                await box.resume_approval(parked.pending_approval)
            except ApprovalError as exc:
                print(exc.reason)

        trio.run(main)
        """
    )
    assert out.split("\n")[:4] == [
        "False",
        "action-required [] True",
        "success paid 5 [5]",
        "replayed",
    ]


def test_elicitation_loads_when_a_tool_first_asks_and_then_works() -> None:
    """A tool's ``ctx.elicit`` loads elicitation on its first call and gets the host's
    answer, validated into the type it asked for."""
    out = _run(
        """
        import sys
        import msgspec, trio
        from operative import ToolCall, ToolContext, Toolbox, tool
        from operative.tools import ExecutionContext

        class Confirm(msgspec.Struct):
            approved: bool

        @tool
        async def delete(path: str, ctx: ToolContext) -> str:
            \"\"\"Delete a file once a person confirms.\"\"\"
            answer = await ctx.elicit(f"Delete {path}?", Confirm)
            return f"approved={answer.approved}"

        async def on_elicitation(request):
            from operative.tools import ElicitationResponse
            return ElicitationResponse(
                request_id=request.request_id,
                tool_call_id=request.tool_call_id,
                data={"approved": True},
            )

        async def main():
            print("operative.tools._elicitation" in sys.modules)
            context = ExecutionContext(run_id="r", on_elicitation=on_elicitation)
            call = ToolCall(id="c1", name="delete", arguments={"path": "/tmp/x"})
            result = await Toolbox([delete]).execute(call, context)
            print(result.outcome, result.value, "operative.tools._elicitation" in sys.modules)

        trio.run(main)
        """
    )
    assert out.split("\n")[:2] == ["False", "success approved=True True"]


def test_a_stall_policy_loads_the_watchdog_which_then_aborts_a_hung_run() -> None:
    """A run given ``stall_policy=`` loads the watchdog, which aborts the hung run."""
    out = _run(
        """
        import sys
        import trio, trio.testing
        import operative
        from operative import create_agent

        async def generate(request):
            await trio.sleep_forever()

        async def main():
            from operative.liveness import StallPolicy

            policy = StallPolicy(stall_after=5, abort_when_stalled=True)
            print("operative.liveness._watchdog" in sys.modules)
            agent = create_agent(generate=generate, instructions="Hang.", stall_policy=policy)
            result = await agent.run("hi")
            print(result.finish_reason, trio.current_time())

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        """
    )
    assert out.split("\n")[:2] == ["True", "aborted 5.0"]


def test_retry_options_load_and_retry_a_failed_model_call() -> None:
    """``retry=`` loads the retry policy, which retries a transient provider failure."""
    out = _run(
        """
        import sys
        import trio, trio.testing
        import operative
        from operative import GenerateResponse, ProviderError, create_agent

        calls = []

        async def generate(request):
            calls.append(1)
            if len(calls) == 1:
                raise ProviderError("overloaded", retryable=True)
            return GenerateResponse(content="ok")

        async def main():
            print("operative.retry" in sys.modules)
            from operative.retry import RetryOptions

            retry = RetryOptions(max_attempts=2)
            agent = create_agent(generate=generate, instructions="Answer.", retry=retry)
            result = await agent.run("hi")
            print(result.content, len(calls))

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        """
    )
    assert out.split("\n")[:2] == ["False", "ok 2"]


def test_options_of_deferred_types_are_still_checked_when_given() -> None:
    """``retry=`` and ``stall_policy=`` of the wrong type are refused when the agent is
    defined, though their types load only when such an option is given."""
    out = _run(
        """
        import sys
        from operative import GenerateResponse, InvalidArgument, create_agent

        async def generate(request):
            return GenerateResponse(content="ok")

        for option, value in (("retry", "twice"), ("stall_policy", 5.0)):
            try:
                create_agent(generate=generate, instructions="Hi.", **{option: value})
            except InvalidArgument as exc:
                print(exc)
        print(sorted(m for m in ("operative.retry", "operative.liveness._watchdog")
                     if m in sys.modules))
        """
    )
    assert out.split("\n")[:3] == [
        "retry= takes RetryOptions, got str",
        "stall_policy= takes a StallPolicy, got float",
        "['operative.liveness._watchdog', 'operative.retry']",
    ]


def test_sqlite_store_works_after_a_lazy_import(tmp_path: Path) -> None:
    """The lazily loaded SqliteStore is the real class: it stores and reads a value."""
    out = _run(
        f"""
        import trio
        import operative
        from operative.kvstore import Put, SqliteStore
        from operative.kvstore._sqlite import SqliteStore as Direct

        assert operative.kvstore.SqliteStore is SqliteStore is Direct

        async def main():
            async with SqliteStore({str(tmp_path)!r} + "/kv.db") as store:
                await store.conditional_batch([Put(key="k", value="v")])
                print((await store.get("k")).value)

        trio.run(main)
        """
    )
    assert out.strip() == "v"


def test_validation_failure_locates_the_path_after_a_lazy_load() -> None:
    """The failure walk (``_locate``) loads on the first failure and names the path."""
    out = _run(
        """
        import sys
        import msgspec
        import operative
        from operative._core._errors import CorruptRecordError

        class Inner(msgspec.Struct):
            n: int

        class Outer(msgspec.Struct):
            items: list[Inner]

        assert operative.decode(b'{"items": [{"n": 1}]}', Outer) == Outer([Inner(1)])
        assert "operative._core._locate" not in sys.modules
        try:
            operative.decode(b'{"items": [{"n": 1}, {"n": "x"}]}', Outer, what="a record")
        except CorruptRecordError as exc:
            print(exc)
            print("operative._core._locate" in sys.modules)
        """
    )
    assert "$.items[1].n" in out
    assert out.split()[-1] == "True"


def test_unknown_attribute_still_raises() -> None:
    """A name that is not exported is an AttributeError, lazily loaded packages included."""
    out = _run(
        """
        import operative, operative.kvstore, operative.liveness
        for module in (operative, operative.kvstore, operative.liveness):
            try:
                getattr(module, "NoSuchName")
            except AttributeError as exc:
                print("NoSuchName" in str(exc))
        """
    )
    assert out.split() == ["True", "True", "True"]


@pytest.mark.heavy
def test_import_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    """``benchmarks/bench_import.py --quick --json`` runs and records every figure."""
    import json

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "import.json"
    done = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / "bench_import.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert "-X importtime" in done.stdout
    figures = json.loads(out.read_text())
    assert set(figures["importtime_ms"]) == {
        "operative",
        "trio",
        "operative.testing",
        "operative.ui",
    }
    assert all(len(v) == 3 and min(v) > 0 for v in figures["importtime_ms"].values())
    assert "operative --help" in figures["wall_ms"]
    assert figures["operative_vs_trio_importtime"] > 0
    assert "sqlite3" not in figures["optional_loaded"]


def test_cli_help_loads_no_command_dependencies() -> None:
    """``operative --help`` builds the parser without the stores, providers or servers."""
    out = _run(
        """
        import contextlib, io, sys
        from operative.cli import main

        with contextlib.redirect_stdout(io.StringIO()) as text:
            code = main(["--help"], env={})
        heavy = ("operative.durable", "operative.providers", "operative.runstore",
                 "operative.sessions", "operative.budgets", "operative.cli._running",
                 "operative.cli._inspect", "operative.cli._serve", "sqlite3", "httpx")
        print(code, "usage:" in text.getvalue(), sorted(m for m in heavy if m in sys.modules))
        """
    )
    assert out.strip() == "0 True []"


def test_ui_import_does_not_build_the_command_line() -> None:
    """``import operative.ui`` uses the chat host without loading the CLI's parser."""
    out = _run(
        """
        import sys
        import operative.ui
        print(sorted(m for m in ("operative.cli._main", "argparse") if m in sys.modules))
        from operative.cli import main
        print(callable(main), "operative.cli._main" in sys.modules)
        """
    )
    assert out.split("\n")[:2] == ["[]", "True True"]
