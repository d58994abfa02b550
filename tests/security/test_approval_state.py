"""A store error while an approval is used up is bookkeeping, not the tool's failure.

It is a typed :class:`operative.tools.ApprovalStateError` (an ``ApprovalError`` whose ``reason``
is ``"state-unavailable"``): the call has not run, the approval has not been used, and
the same approval resumes (once) when the store answers again. The store is a real
:class:`operative.kvstore.SqliteStore` whose database another process locks (``BEGIN
EXCLUSIVE``), and the chat page is the real ``operative serve``'s.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from operative import OperativeError
from operative._core._types import PendingApproval, ToolCall
from operative.kvstore import Operation, SqliteStore, Versioned
from operative.tools import ApprovalError, ApprovalStateError, Toolbox, tool

from ._command import start, stop

SECRET = b"k" * 32
LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")  # the database's write lock, held until told
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
print("released", flush=True)
"""


@asynccontextmanager
async def locked(database: Path) -> AsyncIterator[None]:
    """Another process holds ``database``'s write lock (``BEGIN EXCLUSIVE``) inside."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", LOCKER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        said = b""
        with trio.fail_after(30):
            while not said.endswith(b"\n"):
                chunk = await process.stdout.receive_some()
                assert chunk, said
                said += chunk
        assert said == b"locked\n"
        yield
        await process.stdin.send_all(b"\n")
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def note_tool(ran: list[str]) -> Any:
    @tool(version="1", needs_approval=True)
    async def save_note(text: str) -> str:
        """Save a note (asks first)."""
        ran.append(text)
        return f"saved {text!r}"

    return save_note


async def parked_approval(toolbox: Toolbox) -> PendingApproval:
    result = await toolbox.execute(
        ToolCall(id="call-1", name="save_note", arguments={"text": "milk"})
    )
    assert result.outcome == "action-required"
    assert result.pending_approval is not None
    return result.pending_approval


def assert_state_error(error: ApprovalStateError, approval: PendingApproval) -> None:
    assert isinstance(error, ApprovalError)  # `except ApprovalError` callers still catch it
    assert isinstance(error, OperativeError)
    assert error.reason == "state-unavailable"
    message = str(error)
    assert f"approval {approval.approval_id} was not used" in message
    assert "try the same approval again" in message
    assert error.__cause__ is not None  # the store's own error, for whoever debugs it


async def test_a_locked_store_leaves_the_approval_usable_and_the_tool_unrun(
    tmp_path: Path,
) -> None:
    database = tmp_path / "approvals.db"
    ran: list[str] = []
    async with SqliteStore(database, busy_timeout=0.2) as store:
        toolbox = Toolbox([note_tool(ran)], approval_secret=SECRET, approval_state=store)
        approval = await parked_approval(toolbox)
        await store.get("create the file")  # the database exists (in WAL mode) first

        async with locked(database):
            with pytest.raises(ApprovalStateError) as resumed:
                await toolbox.resume_approval(approval)
            assert_state_error(resumed.value, approval)
            assert "was not run" in str(resumed.value)
            with pytest.raises(ApprovalStateError) as denied:
                await toolbox.deny_approval(approval, reason="no")
            assert_state_error(denied.value, approval)
            assert "was not denied" in str(denied.value)
            assert ran == []
        assert await store.list("approval/") == []  # nothing recorded it as used

        result = await toolbox.resume_approval(approval)  # the same approval, now
        assert (result.outcome, result.value) == ("success", "saved 'milk'")
        assert ran == ["milk"]
        with pytest.raises(ApprovalError) as again:
            await toolbox.resume_approval(approval)
        assert again.value.reason == "replayed"
        assert not isinstance(again.value, ApprovalStateError)
        assert ran == ["milk"]  # never twice


class LostReply(SqliteStore):
    """A real SqliteStore whose next write commits and then fails to say so (a dropped
    connection after the COMMIT): the marker is stored, the caller sees an error."""

    lose_next = False

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        versions = await super().conditional_batch(operations)
        if self.lose_next:
            self.lose_next = False
            raise OSError(104, "Connection reset by peer")
        return versions


async def test_a_store_that_fails_after_writing_takes_its_marker_back(tmp_path: Path) -> None:
    """The consumer deletes the marker it wrote (recognised by its nonce): the approval
    stays usable, and then runs once."""
    ran: list[str] = []
    async with LostReply(tmp_path / "approvals.db") as store:
        toolbox = Toolbox([note_tool(ran)], approval_secret=SECRET, approval_state=store)
        approval = await parked_approval(toolbox)
        store.lose_next = True
        with pytest.raises(ApprovalStateError) as caught:
            await toolbox.resume_approval(approval)
        assert isinstance(caught.value.__cause__, OSError)
        assert ran == []
        markers: list[Versioned] = list(await store.list("approval/"))
        assert markers == []  # taken back
        result = await toolbox.resume_approval(approval)
        assert result.outcome == "success"
        assert ran == ["milk"]


# -- the chat host and its page -----------------------------------------------------------


def events(sse: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for frame in sse.split("\n\n"):
        kind, data = "message", ""
        for line in frame.splitlines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
        if data:
            found.append((kind, json.loads(data)))
    return found


@pytest.mark.heavy  # a real server and a second process locking its store: about ten seconds
async def test_the_host_answers_a_locked_store_with_a_typed_turn_error(tmp_path: Path) -> None:
    """``operative serve``: a decision while its database is locked gets ``turn.error``
    with ``error_type`` ``ApprovalStateError`` and ``reason`` ``state-unavailable``; the
    history still awaits the call, no note is saved; the same decision then succeeds."""
    data_dir = tmp_path / "data"
    child = await start("serve", "--offline", "--port", "0", data_dir=data_dir)
    try:
        with trio.fail_after(120):
            url = (await child.read_until(r"serving the chat page at (\S+)/ ")).group(1)
            async with httpx.AsyncClient(timeout=60) as client:
                turn = await client.post(
                    url + "/api/turn", json={"message": "remember to buy milk"}
                )
                parked = events(turn.text)[-1][1]
                [approval] = parked["pending"]
                decision = {
                    "history": parked["history"],
                    "conversation_id": parked["conversation_id"],
                    "decisions": [{"approval": approval, "approved": True}],
                }
                async with locked(data_dir / "operative.db"):
                    refused = events((await client.post(url + "/api/turn", json=decision)).text)
                kinds = [kind for kind, _ in refused]
                assert "approval.resolved" not in kinds
                [error] = [data for kind, data in refused if kind == "turn.error"]
                assert error["error_type"] == "ApprovalStateError"
                assert error["reason"] == "state-unavailable"
                assert error["call_id"] == approval["call_id"]
                assert refused[-1][0] == "turn.completed"
                assert refused[-1][1]["history"] == parked["history"]
                assert not (data_dir / "notes.txt").exists()

                resumed = events((await client.post(url + "/api/turn", json=decision)).text)
                [resolved] = [data for kind, data in resumed if kind == "approval.resolved"]
                assert resolved["result"]["outcome"] == "success"
                assert (data_dir / "notes.txt").read_text() == "buy milk\n"
    finally:
        await stop(child, terminate=True)


PAGE_DRIVER = r"""
// The chat page's own script, run by Node against the real server, on a small DOM.
const fs = require("fs");
const readline = require("readline");
const [pagePath, base] = process.argv.slice(2);
const html = fs.readFileSync(pagePath, "utf8");
const script = html.split("<script>")[1].split("</script>")[0];

class Element {
  constructor(tag) {
    this.tag = tag; this.children = []; this.parent = null; this.className = "";
    this.dataset = {}; this.disabled = false; this.onclick = null; this.value = "";
    this.type = ""; this.listeners = {}; this._text = "";
  }
  get textContent() { return this._text + this.children.map(c => c.textContent).join(""); }
  set textContent(text) { this._text = text; this.children = []; }
  appendChild(child) { child.parent = this; this.children.push(child); return child; }
  remove() {
    if (this.parent) this.parent.children = this.parent.children.filter(c => c !== this);
    this.parent = null;
  }
  scrollIntoView() {}
  addEventListener(type, listener) { this.listeners[type] = listener; }
  all() { return this.children.flatMap(c => [c, ...c.all()]); }
  querySelectorAll(selector) {
    if (selector === "button") return this.all().filter(e => e.tag === "button");
    if (selector === ".approval button")
      return this.all().filter(e => e.className === "approval").flatMap(
        card => card.all().filter(e => e.tag === "button"));
    throw new Error("selector " + selector);
  }
}
const byId = {};
for (const id of ["log", "status", "send", "composer", "message", "reset"])
  byId[id] = new Element(id === "send" || id === "reset" ? "button" : "div");
const document = {
  getElementById: id => byId[id],
  createElement: tag => new Element(tag),
  querySelectorAll: selector => byId.log.querySelectorAll(selector),
};
const stored = new Map();
const localStorage = {
  getItem: key => (stored.has(key) ? stored.get(key) : null),
  setItem: (key, value) => stored.set(key, String(value)),
};
const page = (path, options) => fetch(base + path, options);

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const driver = `
  (async () => {
    const cards = () => byId.log.all().filter(e => e.className === "approval");
    const report = label => console.log(JSON.stringify({
      label,
      cards: cards().map(c => ({ call: c.dataset.callId,
        enabled: c.all().filter(b => b.tag === "button").map(b => !b.disabled) })),
      pending: Object.keys(state.pending),
      errors: byId.log.all().filter(e => e.className === "error").map(e => e.textContent),
    }));
    byId.message.value = "remember to buy milk";
    await byId.composer.listeners.submit({ preventDefault() {} });
    report("parked");
    await lines.next();
    const [card] = cards();
    await decide(card.dataset.callId, true, card);
    report("refused");
    await lines.next();
    await decide(card.dataset.callId, true, card);
    report("resumed");
    process.exit(0);  // the open standard input would keep Node waiting
  })().catch(error => { console.error(error); process.exit(1); });
`;
new Function("document", "localStorage", "fetch", "byId", "lines", script + driver)(
  document, localStorage, page, byId, lines);
"""


async def test_the_page_keeps_offering_an_approval_the_store_did_not_use(
    tmp_path: Path, node: str
) -> None:
    """The chat page (its script, in Node, on a small DOM, against the real server):
    after a ``state-unavailable`` refusal the approval card stays, its buttons enabled,
    the approval still pending and the error says to try again; the next Approve runs."""
    data_dir = tmp_path / "data"
    child = await start("serve", "--offline", "--port", "0", data_dir=data_dir)
    try:
        with trio.fail_after(120):
            url = (await child.read_until(r"serving the chat page at (\S+)/ ")).group(1)
            async with httpx.AsyncClient(timeout=30) as client:
                page = tmp_path / "page.html"
                page.write_bytes((await client.get(url + "/")).content)
            driver = tmp_path / "driver.js"
            driver.write_text(PAGE_DRIVER)
            browser = await trio.lowlevel.open_process(
                [node, str(driver), str(page), url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            reports = Reports(browser)
            try:
                parked = await reports.next()
                assert len(parked["cards"]) == 1
                assert parked["cards"][0]["enabled"] == [True, True]
                assert parked["pending"] == [parked["cards"][0]["call"]]
                async with locked(data_dir / "operative.db"):
                    await reports.go()
                    refused = await reports.next()
                assert refused["cards"] == parked["cards"]  # still offered, buttons enabled
                assert refused["pending"] == parked["pending"]
                [error] = refused["errors"]
                assert error.startswith("ApprovalStateError (state-unavailable): approval ")
                assert error.endswith(" (the approval is still open: choose Approve or Deny again)")
                assert not (data_dir / "notes.txt").exists()

                await reports.go()
                resumed = await reports.next()
                assert resumed["cards"] == []
                assert resumed["pending"] == []
                assert (data_dir / "notes.txt").read_text() == "buy milk\n"
                assert await browser.wait() == 0
            finally:
                if browser.returncode is None:
                    browser.kill()
                    await browser.wait()
    finally:
        await stop(child, terminate=True)


class Reports:
    """The driver's JSON lines, one per step, and the line that lets it go on."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self.buffer:
            chunk = await stdout.receive_some()
            assert chunk, self.buffer.decode()
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        report: dict[str, Any] = json.loads(line)
        return report

    async def go(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(b"go\n")


def test_sqlite_reports_the_lock_the_tests_rely_on(tmp_path: Path) -> None:
    """BEGIN EXCLUSIVE on a WAL database keeps other writers out (readers stay in)."""
    database = tmp_path / "wal.db"
    first = sqlite3.connect(database, timeout=0, isolation_level=None)
    first.execute("PRAGMA journal_mode = WAL")
    first.execute("CREATE TABLE t (x)")
    second = sqlite3.connect(database, timeout=0, isolation_level=None)
    first.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        second.execute("BEGIN IMMEDIATE")
    assert second.execute("SELECT count(*) FROM t").fetchone() == (0,)
    first.execute("ROLLBACK")
    first.close()
    second.close()
