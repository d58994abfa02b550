"""Adapters that do the same logical agent work on each system ``bench_peers.py`` compares.

Every adapter module exposes the same small surface, read by ``bench_peers.py``'s child
driver:

- ``NAME``: the label in the tables; ``RUNNER``: ``"trio"`` or ``"asyncio"`` (the peers
  run on asyncio inside their own child processes; operative never does);
- ``CALLS``: a one-element list counting tool executions; the harness checks it after
  every scenario, so no system can skip the tool work;
- ``sleep(seconds)``: the runner's sleep (used by the scripted models);
- ``make_steps(steps, latency)``: a no-argument coroutine function doing one run of
  ``steps`` steps: one ``add(a, b)`` tool call per step (arguments as a raw JSON string),
  then a final answer; the scripted model sleeps ``latency`` seconds per call;
- ``make_parallel(calls, tool_sleep)``: one run whose first step asks for ``calls``
  ``wait(ms)`` tool calls at once (each sleeps ``tool_sleep`` seconds), then answers.

Scripted models are per-run stateless: each derives its step from the conversation it is
given (the number of assistant turns so far), so thousands of runs can share one model.
"""
