"""The chat page ``operative serve`` serves at ``/``: one HTML file, inline script, no build.

The page keeps the conversation (the history, its id and the parked approvals) in the
browser's ``localStorage`` and POSTs it with every turn; it reads the reply as
server-sent events from the ``fetch`` response body. Its header says which model
answers, and says plainly when that is the offline stand-in. The favicon is drawn
here too (an SVG, and a PNG in an ICO for browsers that ask for ``/favicon.ico``).
"""

from __future__ import annotations

import html
import math
import struct
import zlib

__all__ = ["FAVICON_ICO", "FAVICON_SVG", "PAGE", "page"]

PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>operative chat</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="icon" href="/favicon.ico" sizes="32x32">
<style>
  html, body { height: 100%; margin: 0; }
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 46rem; margin: 0 auto;
         padding: 0 1rem; color: #1d1d1f; display: flex; flex-direction: column;
         box-sizing: border-box; }
  header { display: flex; justify-content: space-between; align-items: baseline; }
  #log { flex: 1; overflow-y: auto; display: flex; flex-direction: column; gap: .5rem;
         padding: .5rem 0; }
  .msg { padding: .5rem .75rem; border-radius: .6rem; white-space: pre-wrap; }
  .user { align-self: flex-end; background: #dbeafe; }
  .assistant { align-self: flex-start; background: #f3f4f6; }
  .tool-call, .tool-result { font: 13px ui-monospace, monospace; padding: .3rem .6rem;
         border-left: 3px solid #9ca3af; color: #374151; white-space: pre-wrap; }
  .tool-result.success { border-color: #16a34a; }
  .tool-result.denied, .tool-result.error { border-color: #dc2626; }
  .approval { border: 1px solid #f59e0b; background: #fffbeb; border-radius: .6rem;
         padding: .5rem .75rem; }
  .approval button { margin-right: .5rem; }
  .error { color: #b91c1c; background: #fef2f2; padding: .4rem .6rem; border-radius: .4rem; }
  form { display: flex; gap: .5rem; padding: .75rem 0 1rem; border-top: 1px solid #e5e7eb; }
  #message { flex: 1; padding: .5rem; font: inherit; }
  #status { color: #6b7280; font-size: 13px; }
  #model { margin: 0 0 .25rem; color: #6b7280; font-size: 13px; }
  #model.offline { color: #92400e; background: #fffbeb; border: 1px solid #f59e0b;
         border-radius: .4rem; padding: .4rem .6rem; }
</style>
</head>
<body>
<header><h1>operative chat</h1>
  <span><span id="status">idle</span> &middot;
    <button id="reset" type="button">new chat</button></span>
</header>
<!--model-->
<div id="log"></div>
<form id="composer">
  <input id="message" autocomplete="off"
    placeholder="Try: weather in Lisbon, what is 6 * 7, remember to buy milk">
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const KEY = "operative-chat";
const log = document.getElementById("log");
const statusEl = document.getElementById("status");
let state = load();

function load() {
  try { return JSON.parse(localStorage.getItem(KEY)) || fresh(); } catch (e) { return fresh(); }
}
function fresh() { return { history: null, conversation_id: null, pending: {} }; }
function save() { localStorage.setItem(KEY, JSON.stringify(state)); }

function el(cls, text) {
  const node = document.createElement("div");
  node.className = cls;
  if (text !== undefined) node.textContent = text;
  log.appendChild(node);
  node.scrollIntoView({ block: "end" });
  return node;
}
function textOf(content) {
  if (typeof content === "string") return content;
  return (content || []).map(p => p.text || "").join("");
}
function args(a) { return typeof a === "string" ? a : JSON.stringify(a); }
function showCall(call) {
  el("tool-call", "\\u2192 " + call.name + "(" + args(call.arguments) + ")");
}
function showResult(name, outcome, text) {
  el("tool-result " + outcome, "\\u2190 " + name + " [" + outcome + "] " + text);
}
function resultText(r) {
  if (r.error) return r.error;
  return typeof r.value === "string" ? r.value : JSON.stringify(r.value);
}

function showApproval(approval) {
  const card = el("approval");
  card.dataset.callId = approval.call_id;
  const what = document.createElement("div");
  what.textContent = "Approve " + approval.tool_name + "(" + args(approval.arguments) + ")?";
  card.appendChild(what);
  for (const [label, yes] of [["Approve", true], ["Deny", false]]) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = yes ? "approve" : "deny";
    button.textContent = label;
    button.onclick = () => decide(approval.call_id, yes, card);
    card.appendChild(button);
  }
}

function render() {
  log.textContent = "";
  const messages = state.history ? state.history.messages : [];
  for (const m of messages) {
    if (m.role === "user") el("msg user", textOf(m.content));
    else if (m.role === "assistant") {
      if (textOf(m.content)) el("msg assistant", textOf(m.content));
      for (const call of m.tool_calls || []) showCall(call);
    } else if (m.role === "tool") {
      const approval = state.pending[m.tool_call_id];
      if (m.outcome === "action-required" && approval) showApproval(approval);
      else showResult(m.tool_name, m.outcome, textOf(m.content));
    }
  }
}

function setBusy(busy) {
  statusEl.textContent = busy ? "working" : "idle";
  document.getElementById("send").disabled = busy;
  for (const b of document.querySelectorAll(".approval button")) b.disabled = busy;
}

async function turn(body) {
  setBusy(true);
  body.history = state.history;
  body.conversation_id = state.conversation_id;
  const steps = {};
  let failed = false;
  function bubble(step) {
    if (!steps[step]) steps[step] = el("msg assistant", "");
    return steps[step];
  }
  const handlers = {
    "generate.delta": d => { if (d.kind === "text") bubble(d.step).textContent += d.text; },
    "step.generated": d => {
      const b = bubble(d.step);
      if (!b.textContent) b.textContent = d.content;
      if (!b.textContent) b.remove();
      for (const call of d.tool_calls) showCall(call);
    },
    "tool-result.validated": d => {
      if (d.result.outcome !== "action-required")
        showResult(d.result.tool_name, d.result.outcome, resultText(d.result));
    },
    "approval.pending": a => { state.pending[a.call_id] = a; save(); showApproval(a); },
    "approval.resolved": d => {
      delete state.pending[d.call_id]; save();
      showResult(d.result.tool_name, d.result.outcome, resultText(d.result));
    },
    "run.error": d => el("error", "The run failed: " + d.error_type + ": " + d.error),
    "turn.error": d => {
      failed = true;
      // The approval store failed: the approval was not used, so its card stays.
      const open = d.error_type === "ApprovalStateError" || d.reason === "state-unavailable";
      el("error", d.error_type + (d.reason ? " (" + d.reason + ")" : "") + ": " + d.message +
        (open ? " (the approval is still open: choose Approve or Deny again)" : ""));
    },
    "turn.completed": d => {
      state.history = d.history;
      state.conversation_id = d.conversation_id;
      save();
    },
  };
  try {
    const response = await fetch("/api/turn", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      const problem = await response.json().catch(() => ({ error: response.statusText }));
      el("error", "HTTP " + response.status + ": " + problem.error);
      return false;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\\n\\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let type = "message", data = "";
        for (const line of frame.split("\\n")) {
          if (line.startsWith("event: ")) type = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (handlers[type] && data) handlers[type](JSON.parse(data));
      }
    }
  } catch (e) {
    el("error", "The connection failed: " + e);
    failed = true;
  } finally {
    setBusy(false);
  }
  return !failed;
}

async function decide(callId, approved, card) {
  const approval = state.pending[callId];
  if (!approval) return;
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  const ok = await turn({ decisions: [{ approval: approval, approved: approved,
    reason: approved ? "" : "the user said no" }] });
  if (ok) card.remove();  // else it stays, still pending, its buttons enabled again
  else for (const b of card.querySelectorAll("button")) b.disabled = false;
}

document.getElementById("composer").addEventListener("submit", async event => {
  event.preventDefault();
  const input = document.getElementById("message");
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  el("msg user", text);
  await turn({ message: text });
});
document.getElementById("reset").onclick = () => { state = fresh(); save(); render(); };
render();
</script>
</body>
</html>
"""


_OFFLINE_NOTICE = (
    "<strong>Offline stand-in model:</strong> the answers are scripted, not an LLM's. "
    "To chat with a real model, restart <code>operative serve</code> with "
    "<code>--model provider:model</code>, or with <code>ANTHROPIC_API_KEY</code>, "
    "<code>OPENAI_API_KEY</code> or <code>OPENAI_BASE_URL</code> set."
)


def page(model: str, *, offline: bool) -> bytes:
    """The chat page, its header naming ``model`` (and saying so when it is offline)."""
    if offline:
        notice = f'<p id="model" class="offline">{_OFFLINE_NOTICE}</p>'
    else:
        notice = f'<p id="model">model: {html.escape(model)}</p>'
    return PAGE.replace(b"<!--model-->", notice.encode())


FAVICON_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    b'<circle cx="16" cy="16" r="15" fill="#2563eb"/>'
    b'<circle cx="16" cy="16" r="7" fill="#fff"/></svg>\n'
)


def _png(size: int) -> bytes:
    """FAVICON_SVG's ring as a ``size``-pixel RGBA PNG."""
    centre, rows = (size - 1) / 2, bytearray()
    for y in range(size):
        rows.append(0)  # filter: none
        for x in range(size):
            distance = math.hypot(x - centre, y - centre) / (size / 2)
            if distance <= 7 / 16:
                rows += b"\xff\xff\xff\xff"
            elif distance <= 15 / 16:
                rows += b"\x25\x63\xeb\xff"
            else:
                rows += b"\x00\x00\x00\x00"

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + chunk(b"IEND", b"")
    )


def _ico(png: bytes, size: int) -> bytes:
    """One PNG image in an ICO container."""
    directory = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(png), 6 + 16)
    return directory + entry + png


FAVICON_ICO = _ico(_png(32), 32)
