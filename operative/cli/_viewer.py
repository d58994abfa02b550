"""The run viewer's pages: a run as a timeline beside its transcript, and the runs list.

Server-side HTML with inline SVG and CSS: no CDN, no build step, readable without
JavaScript. With ``live=True`` a small script refreshes the page while runs are in
flight (it re-fetches the same URL and swaps the page's main element).

What the timeline draws comes from the run store alone. Tool calls have a start and a
settle commit time; a model call has no recorded start, so its bar spans from the
previous journal commit (the run's creation, or the previous step's results) to the
commit of the step's assistant message: that span includes the engine's own work.
The store records no stalls and no model retries, so neither is drawn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from ..runstore import RunDetail, RunSummary, StepRecord, ToolCallRecord
from ._output import describe_cost, tokens

__all__ = ["calls_by_step", "pending_approvals", "render_run", "render_runs"]

_WIDTH = 760
_LABEL = 150
_ROW = 18
_GAP = 6

_STYLE = """
:root{--ok:#2f855a;--err:#c53030;--warn:#b7791f;--model:#3b6fb6;--mute:#6b7280;
--line:#e5e7eb;font-family:system-ui,-apple-system,Segoe UI,sans-serif;color:#111827}
body{margin:0;background:#f9fafb}
header{background:#111827;color:#f9fafb;padding:.6rem 1rem}
header a{color:#93c5fd}
main{padding:1rem;max-width:1400px}
h1{font-size:1.2rem;margin:.2rem 0}h2{font-size:1rem;margin:1rem 0 .4rem}
table{border-collapse:collapse;background:#fff}
th,td{border-bottom:1px solid var(--line);padding:.3rem .5rem;text-align:left;
font-size:.85rem;vertical-align:top}
th{background:#f3f4f6}
.status-completed{color:var(--ok)}.status-error{color:var(--err)}
.status-aborted{color:var(--warn)}.status-running{color:var(--model)}
.status-waiting{color:var(--warn)}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;font-size:.9rem}
.facts dt{color:var(--mute)}.facts dd{margin:0}
.error{background:#fef2f2;border-left:4px solid var(--err);padding:.4rem .6rem;
white-space:pre-wrap}
.abort{background:#fffbeb;border-left:4px solid var(--warn);padding:.4rem .6rem}
.split{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1rem}
@media (max-width:1000px){.split{grid-template-columns:1fr}}
.timeline{background:#fff;border:1px solid var(--line);overflow-x:auto}
.timeline-svg{display:block;width:100%;height:auto;min-width:520px}
svg text{font-size:11px;fill:#374151}
.bar.model{fill:var(--model)}.bar.success{fill:var(--ok)}.bar.error{fill:var(--err)}
.bar.denied,.bar.action-required{fill:var(--warn)}.bar.cancelled{fill:#9ca3af}
.bar.in-flight{fill:#93c5fd;stroke:var(--model);stroke-dasharray:3 2}
.mark{font-weight:bold}
.legend{font-size:.8rem;color:var(--mute)}
.legend span{display:inline-block;width:.8em;height:.8em;margin:0 .2em 0 .8em;
vertical-align:middle}
.msg{background:#fff;border:1px solid var(--line);border-radius:4px;padding:.4rem .6rem;
margin:.3rem 0;font-size:.85rem;white-space:pre-wrap;overflow-wrap:anywhere}
.msg .role{font-weight:bold;color:var(--mute);font-size:.75rem;text-transform:uppercase}
.step{background:#fff;border:1px solid var(--line);margin:.5rem 0;padding:.4rem .6rem}
.step h3{font-size:.9rem;margin:.1rem 0}
.call{border-top:1px dashed var(--line);padding:.3rem 0;font-size:.85rem}
pre{background:#f3f4f6;padding:.3rem;margin:.2rem 0;white-space:pre-wrap;
overflow-wrap:anywhere;font-size:.8rem}
.outcome-success{color:var(--ok)}.outcome-error{color:var(--err)}
.outcome-denied,.outcome-action-required{color:var(--warn)}
.live{color:var(--model);font-size:.8rem}
form.filters{display:flex;gap:.6rem;flex-wrap:wrap;align-items:end;margin:.5rem 0}
form.filters label{font-size:.8rem;display:flex;flex-direction:column}
"""

_LIVE_SCRIPT = """
(function(){
  var main=document.querySelector('main');
  if(!main||main.dataset.live!=='1'){return;}
  function tick(){
    fetch(location.href,{headers:{'Accept':'text/html'}}).then(function(r){
      return r.ok?r.text():null;
    }).then(function(text){
      if(text===null){return setTimeout(tick,2000);}
      var doc=new DOMParser().parseFromString(text,'text/html');
      var fresh=doc.querySelector('main');
      if(fresh){main.replaceWith(fresh);main=fresh;}
      if(main.dataset.live==='1'){setTimeout(tick,2000);}
    }).catch(function(){setTimeout(tick,5000);});
  }
  setTimeout(tick,2000);
})();
"""


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(value: float) -> str:
    if value < 0.001:
        return f"{value * 1_000_000:.0f} µs"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"


def _cost(cost_usd: float | None) -> str:
    return "n/a" if cost_usd is None else f"${cost_usd:.4f}"


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(msgspec.to_builtins(value), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _document(title: str, body: str, *, live: bool) -> str:
    script = f"<script>{_LIVE_SCRIPT}</script>" if live else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}{script}</body></html>\n"
    )


def _status(status: str) -> str:
    return f'<span class="status status-{escape(status)}">{escape(status)}</span>'


def calls_by_step(detail: RunDetail) -> dict[int, list[ToolCallRecord]]:
    """Each step's calls in the order the model asked for them (the store lists them in
    the order they started, which parallel calls need not keep), by step number in
    step order; calls of a step the store has no message for come last."""
    by_step: dict[int, list[ToolCallRecord]] = {}
    for call in detail.tool_calls:
        by_step.setdefault(call.step, []).append(call)
    ordered: dict[int, list[ToolCallRecord]] = {}
    for step in detail.steps:
        calls = by_step.pop(step.step, None)
        if calls is not None:
            position = {call.id: index for index, call in enumerate(step.tool_calls)}
            calls.sort(key=lambda call: position.get(call.call_id, len(position)))
            ordered[step.step] = calls
    for number in sorted(by_step):
        ordered[number] = by_step[number]
    return ordered


def pending_approvals(detail: RunDetail) -> list[str]:
    """The tools whose calls wait for a person's approval: the run ended (completed)
    after a step whose results include a call parked for approval (``action-required``);
    ``[]`` for any other run."""
    if detail.summary.status != "completed" or not detail.steps:
        return []
    return [r.tool_name for r in detail.steps[-1].results if r.outcome == "action-required"]


# --------------------------------------------------------------------------- run page


def _span(detail: RunDetail) -> tuple[float, float]:
    """The timeline's start and end (epoch seconds)."""
    run = detail.summary
    ends = [run.updated_at, run.created_at]
    ends += [s.committed_at for s in detail.steps]
    ends += [s.completed_at for s in detail.steps if s.completed_at is not None]
    ends += [c.settled_at or c.started_at for c in detail.tool_calls]
    start = min([run.created_at, *(c.started_at for c in detail.tool_calls)])
    return start, max(ends)


def _model_start(detail: RunDetail, index: int) -> float:
    """The previous journal commit before step ``index``'s assistant message."""
    if index == 0:
        return detail.summary.created_at
    previous = detail.steps[index - 1]
    return previous.completed_at or previous.committed_at


def _timeline(detail: RunDetail, *, now: float) -> str:
    start, end = _span(detail)
    running = detail.summary.status == "running"
    if running:
        end = max(end, now)
    scale = (_WIDTH - _LABEL - 10) / max(end - start, 1e-6)

    def x(at: float) -> float:
        return _LABEL + (at - start) * scale

    calls = calls_by_step(detail)
    parts: list[str] = []
    y = 22
    for index, step in enumerate(detail.steps):
        step_calls = calls.pop(step.step, [])
        parts.append(_step_rows(detail, index, step, step_calls, y, x, now=now))
        y += _ROW * (1 + len(step_calls)) + _GAP
    for number, orphans in sorted(calls.items()):
        # Calls of a step whose assistant message is not journaled (cannot happen in a
        # consistent journal, but the page shows what the store returns).
        parts.append(
            f'<text x="4" y="{y + 12}">step {number}</text>'
            + "".join(
                _call_bar(call, y + _ROW * (i + 1), x, now=now) for i, call in enumerate(orphans)
            )
        )
        y += _ROW * (1 + len(orphans)) + _GAP
    if detail.summary.outcome is not None and detail.summary.status == "aborted":
        at = x(detail.summary.updated_at)
        parts.append(
            f'<g class="abort-mark"><line x1="{at:.1f}" y1="16" x2="{at:.1f}" y2="{y}" '
            'stroke="#b7791f" stroke-width="2"/>'
            f'<text class="mark" x="{at:.1f}" y="{y + 12}" text-anchor="end" fill="#b7791f">'
            f"aborted here</text><title>aborted: "
            f"{escape(detail.summary.outcome.abort_reason or 'no reason given')}</title></g>"
        )
        y += 16
    axis = (
        f'<text x="{_LABEL}" y="12">0</text>'
        f'<text x="{_WIDTH - 10}" y="12" text-anchor="end">{_seconds(end - start)}</text>'
        f'<line x1="{_LABEL}" y1="16" x2="{_WIDTH - 10}" y2="16" stroke="#e5e7eb"/>'
    )
    height = max(y + 4, 40)
    label = f"Timeline of run {detail.summary.run_id}: {len(detail.steps)} steps"
    return (
        f'<svg class="timeline-svg" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}">{axis}{"".join(parts)}</svg>'
    )


def _step_rows(
    detail: RunDetail,
    index: int,
    step: StepRecord,
    step_calls: Sequence[ToolCallRecord],
    y: int,
    x: Any,
    *,
    now: float,
) -> str:
    begin = _model_start(detail, index)
    x0, x1 = x(begin), x(step.committed_at)
    took = step.committed_at - begin
    title = (
        f"step {step.step}: model {step.model or 'not reported'}, {tokens(step.usage)} tokens, "
        f"{_seconds(took)} from the previous commit to the answer's commit"
    )
    row = (
        f'<g class="step-row" data-step="{step.step}" data-state="{escape(step.state)}">'
        f'<text x="4" y="{y + 12}">step {step.step}'
        f"{' (aborted)' if step.state == 'aborted' else ''}</text>"
        f'<rect class="bar model" x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 2):.1f}" '
        f'height="{_ROW - 4}"><title>{escape(title)}</title></rect>'
    )
    for i, call in enumerate(step_calls):
        row += _call_bar(call, y + _ROW * (i + 1), x, now=now)
    return row + "</g>"


def _call_bar(call: ToolCallRecord, y: int, x: Any, *, now: float) -> str:
    end = call.settled_at if call.settled_at is not None else now
    x0, x1 = x(call.started_at), x(end)
    took = _seconds(call.duration) if call.duration is not None else "not settled by itself"
    marks: list[str] = []
    if call.attempts > 1:
        marks.append(f"↻{call.attempts}")
    if call.outcome == "action-required":
        marks.append("waits for approval")
    if call.unknown_outcome:
        marks.append("? outcome unknown")
    title = f"{call.tool_name} ({call.call_id}): {call.outcome}, {took}"
    if call.attempts > 1:
        title += f", {call.attempts} attempts (run again on recovery)"
    if call.error:
        title += f"\n{call.error}"
    mark = (
        f'<text class="mark" x="{x1 + 4:.1f}" y="{y + 12}">{escape(" ".join(marks))}</text>'
        if marks
        else ""
    )
    return (
        f'<g class="call-row"><text x="14" y="{y + 12}">{escape(call.tool_name[:20])}</text>'
        f'<rect class="bar tool {escape(call.outcome)}" data-call-id="{escape(call.call_id)}" '
        f'x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 2):.1f}" height="{_ROW - 6}">'
        f"<title>{escape(title)}</title></rect>{mark}</g>"
    )


def _legend() -> str:
    items = (
        ("var(--model)", "model (previous commit → answer)"),
        ("var(--ok)", "tool: success"),
        ("var(--err)", "tool: error"),
        ("var(--warn)", "denied / waiting for approval"),
        ("#93c5fd", "in flight"),
    )
    keys = "".join(f'<span style="background:{c}"></span>{escape(t)}' for c, t in items)
    return f'<p class="legend">{keys} &nbsp; ↻N: attempts (run again on recovery)</p>'


def _run_status(run: RunSummary, detail: RunDetail) -> str:
    """The run's status: a run that stopped for a person's approval is waiting for it
    (the store says ``completed``: the run itself ended, and a later one resumes the
    call once someone decides)."""
    waiting = pending_approvals(detail)
    if waiting:
        return (
            '<span class="status status-waiting">waiting for approval</span> '
            f"({escape(', '.join(waiting))}; the run {escape(run.status)}: "
            f"{escape(run.finish_reason or 'not finished')})"
        )
    return f"{_status(run.status)} ({escape(run.finish_reason or 'not finished')})"


def _facts(run: RunSummary, detail: RunDetail) -> str:
    rows: list[tuple[str, str]] = [
        ("status", _run_status(run, detail)),
        ("agent", escape(run.agent_name)),
        ("session", escape(run.session_id or "-")),
        ("created", _when(run.created_at)),
        ("updated", _when(run.updated_at)),
        ("steps", str(len(detail.steps))),
        ("tokens", escape(tokens(run.usage))),
        (
            "cost",
            escape(
                describe_cost(run.cost_usd, usage=run.usage, unpriced_models=run.unpriced_models)
            ),
        ),
    ]
    if run.status == "running":
        lease = (
            f"{escape(run.lease_owner)} until {_when(run.lease_expires_at)}"
            if run.lease_owner
            else "nobody holds it (run `operative recover` to resume it)"
        )
        rows.append(("lease", lease))
    elif run.lease_owner:
        rows.append(("last lease", escape(run.lease_owner)))
    recovered = [c for c in detail.tool_calls if c.attempts > 1]
    unknown = [c for c in detail.tool_calls if c.unknown_outcome]
    if recovered or unknown:
        rows.append(
            (
                "recoveries",
                escape(
                    f"{len(recovered)} call(s) run again after a worker stopped "
                    f"(up to {max((c.attempts for c in recovered), default=1)} attempts); "
                    f"{len(unknown)} with an unknown outcome"
                ),
            )
        )
    if run.cancel_requested:
        rows.append(("cancel", escape(f"requested: {run.cancel_reason}")))
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _transcript(detail: RunDetail) -> str:
    parts = []
    for message in detail.transcript.messages:
        role = message.role
        extra = ""
        if role == "tool":
            extra = f" · {escape(message.tool_name or '')}: {escape(str(message.outcome))}"
        calls = ""
        if message.tool_calls:
            names = ", ".join(call.name for call in message.tool_calls)
            calls = f"\n[calls {escape(names)}]"
        parts.append(
            f'<div class="msg {escape(role)}"><div class="role">{escape(role)}{extra}</div>'
            f"{escape(message.text)}{calls}</div>"
        )
    return "".join(parts) or "<p>(no messages journaled yet)</p>"


def _call_detail(call: ToolCallRecord) -> str:
    took = _seconds(call.duration) if call.duration is not None else "-"
    head = (
        f"<b>{escape(call.tool_name)}</b> <code>{escape(call.call_id)}</code>: "
        f'<span class="outcome outcome-{escape(call.outcome)}">{escape(call.outcome)}</span>'
        f", {took}"
    )
    if call.attempts > 1:
        head += f", {call.attempts} attempts"
    if call.unknown_outcome:
        head += ", outcome unknown (it was running when its worker stopped)"
    body = f"<div>arguments</div><pre>{escape(_pretty(call.arguments))}</pre>"
    if call.result is not None and call.result.outcome == "success":
        body += f"<div>result</div><pre>{escape(_pretty(call.result.value))}</pre>"
    if call.error:
        body += f'<div>error</div><pre class="error">{escape(call.error)}</pre>'
    return f'<div class="call" data-call-id="{escape(call.call_id)}">{head}{body}</div>'


def _steps(detail: RunDetail) -> str:
    by_step = calls_by_step(detail)
    waiting = len(pending_approvals(detail))
    parts = []
    for step in detail.steps:
        state: str = step.state
        if waiting and step is detail.steps[-1]:
            state += f" · {waiting} call{'s' if waiting > 1 else ''} waiting for approval"
        head = (
            f"step {step.step} · {escape(state)} · {escape(step.model or 'model ?')} · "
            f"{escape(tokens(step.usage))} tokens · cost {_cost(step.cost_usd)}"
        )
        says = f'<div class="msg">{escape(step.content)}</div>' if step.content else ""
        calls = "".join(_call_detail(call) for call in by_step.get(step.step, []))
        parts.append(
            f'<section class="step" data-step="{step.step}"><h3>{head}</h3>{says}{calls}</section>'
        )
    return "".join(parts) or "<p>(no steps journaled yet)</p>"


def render_run(
    detail: RunDetail, *, now: float, live: bool = False, runs_href: str | None = None
) -> str:
    """One run's page; ``now`` ends the bars of calls still in flight."""
    run = detail.summary
    outcome = run.outcome
    notices = ""
    if outcome is not None and outcome.error:
        kind = f"{outcome.error_type}: " if outcome.error_type else ""
        notices += f'<div class="error" id="run-error">{escape(kind + outcome.error)}</div>'
    if outcome is not None and outcome.abort_reason:
        notices += (
            f'<div class="abort" id="run-abort">aborted: {escape(outcome.abort_reason)}</div>'
        )
    answer = ""
    if outcome is not None and outcome.content:
        answer = f'<h2>Answer</h2><div class="msg">{escape(outcome.content)}</div>'
    in_flight = live and run.status == "running"
    live_note = (
        '<p class="live">in flight: this page refreshes by itself (reload it without '
        "JavaScript)</p>"
        if in_flight
        else ""
    )
    back = f'<a href="{escape(runs_href)}">← all runs</a> · ' if runs_href else ""
    body = (
        f"<header>{back}operative run viewer</header>"
        f'<main data-live="{1 if in_flight else 0}" data-status="{escape(run.status)}">'
        f"<h1>run {escape(run.run_id)}</h1>{live_note}{_facts(run, detail)}{notices}"
        '<div class="split"><div><h2>Timeline</h2>'
        f'<div class="timeline">{_timeline(detail, now=now)}</div>{_legend()}'
        f"<h2>Steps</h2>{_steps(detail)}{answer}</div>"
        f'<div><h2>Transcript</h2><div class="transcript">{_transcript(detail)}</div></div>'
        "</div></main>"
    )
    return _document(f"run {run.run_id}", body, live=live)


# -------------------------------------------------------------------------- runs page


def render_runs(
    runs: Iterable[RunSummary],
    *,
    filters: Mapping[str, str | None],
    next_cursor: str | None = None,
    live: bool = False,
    run_href: str = "/runs/",
) -> str:
    """The runs list, with a filter form (status, agent, session, since)."""
    items = list(runs)
    rows = []
    for run in items:
        href = run_href + quote(run.run_id)
        rows.append(
            f'<tr class="run" data-status="{escape(run.status)}">'
            f'<td><a href="{escape(href)}">{escape(run.run_id)}</a></td>'
            f"<td>{escape(run.agent_name)}</td><td>{escape(run.session_id or '-')}</td>"
            f"<td>{_status(run.status)}</td><td>{escape(run.finish_reason or '-')}</td>"
            f"<td>{run.steps}</td><td>{escape(tokens(run.usage))}</td>"
            f"<td>{_cost(run.cost_usd)}</td><td>{_when(run.created_at)}</td></tr>"
        )
    header = "".join(
        f"<th>{h}</th>"
        for h in (
            "run",
            "agent",
            "session",
            "status",
            "finish",
            "steps",
            "tokens",
            "cost",
            "created",
        )
    )
    table = (
        f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        if rows
        else "<p>no runs match</p>"
    )
    more = ""
    if next_cursor is not None:
        query = {k: v for k, v in filters.items() if v}
        query["after"] = next_cursor
        more = f'<p><a href="?{escape(urlencode(query))}">older runs →</a></p>'
    status = filters.get("status") or ""
    options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s or "any"}</option>'
        for s in ("", "running", "completed", "aborted", "error")
    )

    def field(name: str, hint: str) -> str:
        value = escape(filters.get(name) or "")
        return f'<label>{name}<input name="{name}" value="{value}" placeholder="{hint}"></label>'

    form = (
        f'<form class="filters" method="get"><label>status<select name="status">{options}'
        f"</select></label>{field('agent', 'any agent')}{field('session', 'any session')}"
        f"{field('since', '30m, 2h, 7d, ISO time')}<button>filter</button></form>"
    )
    in_flight = live and any(run.status == "running" for run in items)
    body = (
        "<header>operative run viewer</header>"
        f'<main data-live="{1 if in_flight else 0}"><h1>Runs</h1>{form}'
        f'<p class="legend">{len(items)} run(s) shown</p>{table}{more}</main>'
    )
    return _document("operative runs", body, live=live)
