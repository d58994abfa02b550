"""Retrying generate: which failures, how long to wait, mutators, usage, abort in back-off."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio

import operative
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    ProviderError,
    Usage,
    open_run,
    stop_when,
)
from operative.retry import RetryOptions, fallback_model, is_transient, reduce_max_tokens
from operative.testing import HANG, ScriptedModel


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("go")
    return conversation


async def _run(model: Any, **options: Any) -> tuple[operative.RunResult, list[Any]]:
    events: list[Any] = []
    async with open_run(
        generate=model,
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
        **options,
    ) as run:
        run.add_listener("*", events.append)
    return await run.result(), events


class Flaky(ProviderError):
    """A provider failure that reports what the attempt cost."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        usage = kwargs.pop("usage", None)
        super().__init__(message, **kwargs)
        self.usage = usage


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ProviderError("overloaded", retryable=True), True),
        (ProviderError("rate limited", status=429), True),
        (ProviderError("timeout", status=408), True),
        (ProviderError("bad gateway", status=502), True),
        (ProviderError("bad request", status=400), False),
        (ProviderError("unauthorized", status=401), False),
        (ConnectionResetError("reset"), True),
        (TimeoutError("slow"), True),
        (trio.TooSlowError(), True),
        (ValueError("bug"), False),
    ],
)
def test_transient_classification(error: BaseException, transient: bool) -> None:
    """Only failures that trying again may fix are transient."""
    assert is_transient(error) is transient


async def test_retries_transient_failures_with_backoff(autojump_clock: Any) -> None:
    """Two 429s then success: three attempts, backoff 1 s then 2 s, events for each."""
    model = ScriptedModel(
        [ProviderError("busy", status=429), ProviderError("busy", status=429), "finally"]
    )
    start = trio.current_time()
    result, events = await _run(model, retry=RetryOptions(jitter=False))
    assert result.finish_reason == "stop-condition"
    assert result.content == "finally"
    assert trio.current_time() - start == pytest.approx(3.0)
    retries = [e for e in events if e.type == "generate.retry"]
    assert [(e.attempt, e.delay) for e in retries] == [(2, 1.0), (3, 2.0)]
    assert [r.attempt for r in model.requests] == [1, 2, 3]
    starts = [e.attempt for e in events if e.type == "generate.started"]
    assert starts == [1, 2, 3]


async def test_retry_after_is_honoured(autojump_clock: Any) -> None:
    """A provider's retry_after replaces the computed backoff."""
    model = ScriptedModel([ProviderError("slow down", status=429, retry_after=7.5), "ok"])
    start = trio.current_time()
    await _run(model, retry=RetryOptions(jitter=False))
    assert trio.current_time() - start == pytest.approx(7.5)


async def test_a_retry_after_longer_than_max_delay_is_capped(autojump_clock: Any) -> None:
    """A server asking for an hour is retried after max_delay, not an hour later."""
    model = ScriptedModel([ProviderError("slow down", status=429, retry_after=3600.0), "ok"])
    start = trio.current_time()
    result, events = await _run(model, retry=RetryOptions(max_delay=30.0))
    assert result.content == "ok"
    assert trio.current_time() - start == pytest.approx(30.0)
    assert [e.delay for e in events if e.type == "generate.retry"] == [30.0]


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(3.0, 3.0), (0.0, 0.0), (3600.0, 10.0), (math.inf, 10.0), (math.nan, 1.0), (True, 1.0)],
)
def test_delay_is_the_retry_after_capped_at_max_delay(retry_after: float, expected: float) -> None:
    """retry_after replaces the backoff (1 s here), never past max_delay; junk is ignored."""
    options = RetryOptions(max_delay=10.0, jitter=False)
    error = ProviderError("busy", status=429, retry_after=retry_after)
    assert options.delay(1, error) == expected
    assert options.exceeds_max_delay(error) is (expected == 10.0)


async def test_caller_errors_are_not_retried() -> None:
    """A 400 ends the run at once with the error."""
    model = ScriptedModel([ProviderError("bad request", status=400), "never"])
    result, events = await _run(model, retry=RetryOptions())
    assert result.finish_reason == "error"
    assert model.calls == 1
    assert [e.retryable for e in events if e.type == "generate.error"] == [False]


async def test_gives_up_after_max_attempts(autojump_clock: Any) -> None:
    """After max_attempts transient failures the last error ends the run."""
    model = ScriptedModel([ConnectionError("down")] * 3)
    result, _ = await _run(model, retry=RetryOptions(max_attempts=3))
    assert result.finish_reason == "error"
    assert isinstance(result.error, ConnectionError)
    assert model.calls == 3


async def test_attempt_timeout_is_a_cancel_scope_and_transient(autojump_clock: Any) -> None:
    """A hanging attempt is cut at attempt_timeout and retried."""
    model = ScriptedModel([HANG, "second try"])
    start = trio.current_time()
    result, events = await _run(
        model, retry=RetryOptions(attempt_timeout=10, initial_delay=1, jitter=False)
    )
    assert result.content == "second try"
    assert trio.current_time() - start == pytest.approx(11)
    errors = [e for e in events if e.type == "generate.error"]
    assert errors[0].error_type == "TooSlowError"


async def test_abort_during_backoff(autojump_clock: Any) -> None:
    """An abort while waiting to retry ends the run aborted, without another attempt."""
    model = ScriptedModel([ProviderError("busy", status=503), "never"])
    async with open_run(
        generate=model,
        conversation=_conversation(),
        retry=RetryOptions(initial_delay=60, jitter=False),
    ) as run:
        await trio.sleep(5)
        run.abort("user gave up")
    result = await run.result()
    assert result.finish_reason == "aborted"
    assert model.calls == 1


async def test_usage_of_failed_attempts_is_counted(autojump_clock: Any) -> None:
    """Usage reported by a failed attempt is part of the step's and the run's usage."""
    model = ScriptedModel(
        [
            Flaky("cut off", retryable=True, usage=Usage.of(100, 20)),
            GenerateResponse(content="ok", usage=Usage.of(100, 10)),
        ]
    )
    result, events = await _run(model, retry=RetryOptions())
    assert result.usage == Usage.of(200, 30)
    assert result.steps[0].usage == Usage.of(200, 30)
    (error,) = [e for e in events if e.type == "generate.error"]
    assert error.usage == Usage.of(100, 20)


async def test_mutators_change_the_next_attempt(autojump_clock: Any) -> None:
    """fallback_model and reduce_max_tokens rewrite the retried request's settings."""
    model = ScriptedModel([ProviderError("overloaded", status=529), "ok"])
    await _run(
        model,
        settings={"model": "big", "max_tokens": 4000},
        retry=RetryOptions(mutators=[fallback_model("small"), reduce_max_tokens(0.5)]),
    )
    first, second = model.requests
    assert first.settings == {"model": "big", "max_tokens": 4000}
    assert second.settings == {"model": "small", "max_tokens": 2000}


async def test_retry_on_types_and_predicates(autojump_clock: Any) -> None:
    """retry_on narrows or widens what is retried."""
    model = ScriptedModel([KeyError("flaky lookup"), "ok"])
    result, _ = await _run(model, retry=RetryOptions(retry_on=(KeyError,)))
    assert result.content == "ok"

    model = ScriptedModel([ProviderError("busy", status=429), "never"])
    result, _ = await _run(model, retry=RetryOptions(retry_on=lambda exc: False))
    assert result.finish_reason == "error"


def test_jitter_stays_within_half_and_full_backoff() -> None:
    """With jitter the delay is drawn between half and all of the backoff."""
    low = RetryOptions(initial_delay=4, random=lambda: 0.0)
    high = RetryOptions(initial_delay=4, random=lambda: 0.999999)
    assert low.delay(1) == 2.0
    assert high.delay(1) == pytest.approx(4.0)
    capped = RetryOptions(initial_delay=4, max_delay=10, jitter=False)
    assert [capped.delay(n) for n in (1, 2, 3, 4)] == [4, 8, 10, 10]


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"initial_delay": -1},
        {"attempt_timeout": 0},
        {"retry_on": "429"},
        {"mutators": [42]},
    ],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    """RetryOptions validates eagerly."""
    with pytest.raises(operative.InvalidArgument):
        RetryOptions(**options)


async def test_mutator_returning_the_wrong_type_fails_the_run(autojump_clock: Any) -> None:
    """A mutator returning something else than a request ends the run with a clear error."""

    def broken(request: GenerateRequest, error: BaseException, attempt: int) -> Any:
        return {"model": "x"}

    model = ScriptedModel([ConnectionError("down"), "never"])
    result, _ = await _run(model, retry=RetryOptions(mutators=[broken]))
    assert result.finish_reason == "error"
    assert "retry mutator" in str(result.error)
