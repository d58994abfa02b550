"""Adapters that do the same logical agent work on each system ``bench_peers.py`` compares.

Every adapter module exposes the same small surface, read by ``bench_peers.py``'s child
driver:

- ``NAME``: the label in the tables; ``RUNNER``: ``"trio"`` or ``"asyncio"`` (the peers
  run on asyncio inside their own child processes; operative never does);
- ``CALLS``: a one-element list counting tool executions; the harness checks it after
  every scenario, so no system can skip the tool work;
- ``sleep(seconds)``: the runner's sleep (used by the scripted models);
- ``make_steps(steps, latency)``: a no-argument function returning the system's own
  run coroutine (what its ``run``/``invoke`` call returns) for one run of ``steps``
  steps: one ``add(a, b)`` tool call per step (arguments as a raw JSON string), then a
  final answer; the scripted model sleeps ``latency`` seconds per call;
- ``make_parallel(calls, tool_sleep)``: the same for one run whose first step asks for
  ``calls`` ``wait(ms)`` tool calls at once (each sleeps ``tool_sleep`` seconds), then
  answers;
- ``answer(result)``: the run's answer from what its coroutine returned, raising if the
  run did not end as scripted. The harness reads it in its own frame, the same for every
  system, so no adapter adds a coroutine of its own to what a run holds in flight.

Scripted models are per-run stateless: each derives its step from the conversation it is
given (the number of assistant turns so far), so thousands of runs can share one model.
"""
