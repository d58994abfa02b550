"""The realistic-adapter variant of ``benchmarks/peers/``: each system's model builds the
step's response, with its tool call and its usage, when it is called, as a provider
adapter converting the provider's JSON does, instead of replaying prebuilt responses.

``bench_realistic.py`` measures these adapters. Each module has the surface of a
``benchmarks/peers/`` adapter that ``bench_peers.py``'s per-step and batch machinery reads
(``NAME``, ``RUNNER``, ``CALLS``, ``sleep``, ``make_steps(steps, latency)``,
``answer(result)``); there is no ``make_parallel``.

Every model builds, at step ``k`` of a run of ``steps`` steps, a fresh response of the
same shape in its system's own types:

- ``k < steps``: empty text, one call ``add`` with id ``call-{k}`` and the arguments
  ``{"a": k, "b": 1}`` (a mapping, as an adapter hands over the arguments it decoded;
  openai-agents' ``ResponseFunctionToolCall`` holds the wire's JSON string, so its
  model formats that string), and the step's usage;
- ``k == steps``: the text ``"the answer is 42"`` and the step's usage.

The usage is ``usage(k)``: a prompt that grows with the conversation and a fixed
completion, as a provider reports them. The floor builds plain dicts of that shape; it
is ``peers/floor.py``'s bare loop otherwise (one ``trio.lowlevel.checkpoint()`` a step,
each call's arguments type-checked, one result dict per call).
"""

from __future__ import annotations

PROMPT_TOKENS = 120
"""Prompt tokens of step 1; each later step's prompt is ``PROMPT_PER_STEP`` longer."""
PROMPT_PER_STEP = 40
COMPLETION_TOKENS = 24
ANSWER = "the answer is 42"


def usage(step: int) -> tuple[int, int, int]:
    """``(prompt, completion, total)`` tokens of step ``step``."""
    prompt = PROMPT_TOKENS + PROMPT_PER_STEP * (step - 1)
    return prompt, COMPLETION_TOKENS, prompt + COMPLETION_TOKENS
