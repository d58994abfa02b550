"""Guardrails: checks that allow, rewrite or trip a run's input, answer and tool calls.

``open_run(..., guardrails=[...])`` and ``create_agent(..., guardrails=[...])`` take
:class:`InputGuardrail`, :class:`OutputGuardrail` and :class:`ToolGuardrail` values. A
tripped guardrail ends the run with ``finish_reason == "error"`` and a
:class:`~operative.guardrails.GuardrailTripped` error naming the guardrail and its reason.

Why ``"error"`` and not a finish reason of its own: the five finish reasons are the
specification's, and every consumer of them — the terminal event, sessions' outcomes,
durable run status, liveness, hosts that treat anything but ``"error"`` as an answer
to deliver — already knows that an error run has no answer to accept. A trip is the
run refusing to produce one; the typed error (``except GuardrailTripped``,
``result.error.guardrail``) tells it apart from a failure.
"""

from ._define import Guardrails as Guardrails
from ._define import GuardrailTripped as GuardrailTripped
from ._define import InputGuardrail as InputGuardrail
from ._define import OutputGuardrail as OutputGuardrail
from ._define import ToolGuardrail as ToolGuardrail
from ._define import Verdict as Verdict
from ._define import allow as allow
from ._define import collect_guardrails as collect_guardrails
from ._define import rewrite as rewrite
from ._define import trip as trip

__all__ = [
    "GuardrailTripped",
    "Guardrails",
    "InputGuardrail",
    "OutputGuardrail",
    "ToolGuardrail",
    "Verdict",
    "allow",
    "collect_guardrails",
    "rewrite",
    "trip",
]
