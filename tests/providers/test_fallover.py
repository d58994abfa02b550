"""fallover(): in-turn fallover, hedging on trio's clock, AllProvidersFailed."""

from __future__ import annotations

import pickle

import pytest
import trio
import trio.testing

from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    OperativeError,
    create_agent,
)
from operative._core._errors import RunFailed
from operative.providers import (
    AllProvidersFailed,
    ProviderError,
    ProviderRequestError,
    ProviderUnavailableError,
    fallover,
)
from operative.providers.test import MockProvider, provider_error
from operative.retry import RetryOptions


def request_of(text: str = "hi") -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current)


def answers(text: str, *, after: float = 0.0, name: str = "mock") -> MockProvider:
    async def handler(request: GenerateRequest) -> str:
        await trio.sleep(after)
        return text

    return MockProvider(handler, name=name)


def fails(status: int, *, after: float = 0.0, name: str = "mock") -> MockProvider:
    async def handler(request: GenerateRequest) -> Exception:
        await trio.sleep(after)
        return provider_error(status, provider=name)

    return MockProvider(handler, name=name)


# -- in turn ------------------------------------------------------------------------


async def test_an_overloaded_provider_falls_over_to_the_next_through_an_agent() -> None:
    first, second = fails(529, name="primary"), answers("from backup", name="backup")
    agent = create_agent(generate=fallover([first, second]), retry=RetryOptions(max_attempts=1))
    result = await agent.run("hi")
    assert result.finish_reason == "stop-condition"
    assert result.content == "from backup"
    assert (first.calls, second.calls) == (1, 1)
    message = result.conversation.messages[-1]
    assert message.metadata["operative.provider"] == "backup"
    record = message.metadata["operative.fallover"]
    assert record["provider"] == "backup"
    assert record["index"] == 1
    assert [f["provider"] for f in record["failed"]] == ["primary"]


async def test_the_first_provider_that_answers_is_the_only_one_called() -> None:
    first, second = answers("one", name="a"), answers("two", name="b")
    response = await fallover([first, second])(request_of())
    assert response.content == "one"
    assert response.metadata["operative.provider"] == "a"
    assert second.calls == 0


async def test_a_non_transient_error_propagates_at_once_unwrapped() -> None:
    first, second = fails(400, name="a"), answers("two", name="b")
    with pytest.raises(ProviderRequestError):
        await fallover([first, second])(request_of())
    assert second.calls == 0


async def test_retry_on_decides_what_falls_over() -> None:
    first = MockProvider(lambda r: ValueError("odd"), name="a")
    second = answers("two", name="b")
    generate = fallover([first, second], retry_on=lambda e: isinstance(e, ValueError))
    assert (await generate(request_of())).content == "two"


async def test_all_failing_raises_an_exception_group_that_is_an_operative_error() -> None:
    a, b, c = fails(529, name="a"), fails(429, name="b"), fails(503, name="c")
    generate = fallover([a, b, c])
    with pytest.raises(AllProvidersFailed) as caught:
        await generate(request_of())
    group = caught.value
    assert isinstance(group, ExceptionGroup)
    assert isinstance(group, OperativeError)
    assert group.providers == ("a", "b", "c")
    assert [getattr(e, "status", None) for e in group.exceptions] == [529, 429, 503]
    assert "all 3 providers failed" in str(group)

    caught_whole: list[BaseException] = []
    try:
        await generate(request_of())
    except OperativeError as error:  # caught whole by ``except OperativeError``
        caught_whole.append(error)
    assert [type(e) for e in caught_whole] == [AllProvidersFailed]

    parts: list[BaseExceptionGroup[BaseException]] = []
    try:
        await generate(request_of())
    except* ProviderUnavailableError as unavailable:
        parts.append(unavailable)
    except* ProviderError as other:
        parts.append(other)
    assert [type(p) for p in parts] == [AllProvidersFailed, AllProvidersFailed]
    assert [p.providers for p in parts] == [("a", "c"), ("b",)]  # type: ignore[attr-defined]
    assert [len(p.exceptions) for p in parts] == [2, 1]


def test_all_providers_failed_splits_and_pickles_keeping_its_type() -> None:
    group = AllProvidersFailed(
        "all failed",
        [provider_error(529), ValueError("x")],
        providers=["a", "b"],
    )
    match, rest = group.split(ProviderError)
    assert isinstance(match, AllProvidersFailed)
    assert match.providers == ("a",)
    assert isinstance(rest, AllProvidersFailed)
    assert rest.providers == ("b",)
    sub = group.subgroup(ValueError)
    assert isinstance(sub, AllProvidersFailed)
    assert sub.providers == ("b",)
    again = pickle.loads(pickle.dumps(group))
    assert isinstance(again, AllProvidersFailed)
    assert again.providers == ("a", "b")
    with pytest.raises(InvalidArgument):
        AllProvidersFailed("x", [ValueError()], providers=["a", "b"])


async def test_an_agent_run_that_exhausts_every_provider_ends_in_error() -> None:
    generate = fallover([fails(529, name="a"), fails(500, name="b")])
    agent = create_agent(generate=generate, retry=RetryOptions(max_attempts=1))
    with pytest.raises(RunFailed) as failed:
        await agent.run("hi")
    result = failed.value.result
    assert result.finish_reason == "error"
    assert isinstance(result.error, AllProvidersFailed)


def test_bad_arguments_are_rejected_eagerly() -> None:
    ok = answers("x")
    with pytest.raises(InvalidArgument):
        fallover([])
    with pytest.raises(InvalidArgument):
        fallover(ok)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        fallover([ok, "nope"])  # type: ignore[list-item]
    for bad in (-1, float("nan"), True, "1"):
        with pytest.raises(InvalidArgument):
            fallover([ok], hedge_after=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        fallover([ok], retry_on=3)  # type: ignore[arg-type]


def test_names_come_from_a_mapping_or_the_generate_functions() -> None:
    a, b = answers("x", name="same"), answers("y", name="same")
    assert fallover([a, b]).names == ("same#1", "same#2")
    assert fallover({"fast": a, "slow": b}).names == ("fast", "slow")


def fallover_tasks() -> list[str]:
    """The names of every live task a fallover started."""
    found: list[str] = []
    root = trio.lowlevel.current_root_task()
    assert root is not None
    pending = [root]
    while pending:
        task = pending.pop()
        if task.name.startswith("fallover "):
            found.append(task.name)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return found


# -- hedging --------------------------------------------------------------------


@pytest.mark.parametrize("hedge_after", [0.5, 1.0, 2.5])
async def test_the_next_provider_starts_exactly_at_hedge_after_and_the_winner_cancels_the_loser(
    autojump_clock: trio.testing.MockClock, hedge_after: float
) -> None:
    started: dict[str, float] = {}
    begin = trio.current_time()

    def timed(name: str, after: float) -> MockProvider:
        async def handler(request: GenerateRequest) -> str:
            started[name] = trio.current_time() - begin
            await trio.sleep(after)
            return f"from {name}"

        return MockProvider(handler, name=name)

    slow, fast = timed("slow", 100.0), timed("fast", 1.0)
    response = await fallover([slow, fast], hedge_after=hedge_after)(request_of())
    assert started == {"slow": 0.0, "fast": hedge_after}
    assert trio.current_time() - begin == hedge_after + 1.0
    assert response.content == "from fast"
    assert response.metadata["operative.provider"] == "fast"
    assert response.metadata["operative.fallover"]["cancelled"] == ["slow"]
    assert len(slow.cancelled) == 1
    assert fast.cancelled == []
    assert slow.cancel_reasons == ["fallover: fast answered first"]


async def test_a_first_provider_that_answers_before_hedge_after_runs_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first, second = answers("one", after=0.9, name="a"), answers("two", name="b")
    response = await fallover([first, second], hedge_after=1.0)(request_of())
    assert response.content == "one"
    assert second.calls == 0
    assert response.metadata["operative.fallover"]["cancelled"] == []


async def test_the_first_started_can_still_win_the_race(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first, second = answers("one", after=1.5, name="a"), answers("two", after=5.0, name="b")
    response = await fallover([first, second], hedge_after=1.0)(request_of())
    assert response.content == "one"
    assert len(second.cancelled) == 1
    assert response.metadata["operative.fallover"]["cancelled"] == ["b"]


async def test_a_failure_starts_the_next_provider_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    begin = trio.current_time()
    first, second = fails(529, after=0.2, name="a"), answers("two", after=0.1, name="b")
    response = await fallover([first, second], hedge_after=10.0)(request_of())
    assert response.content == "two"
    assert trio.current_time() - begin == pytest.approx(0.3)
    assert [f["provider"] for f in response.metadata["operative.fallover"]["failed"]] == ["a"]


async def test_losers_that_fail_are_not_errors_unless_all_fail(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = answers("slow answer", after=3.0, name="slow")
    broken = fails(503, after=0.5, name="broken")
    response = await fallover([slow, broken], hedge_after=1.0)(request_of())
    assert response.content == "slow answer"

    with pytest.raises(AllProvidersFailed) as caught:
        await fallover(
            [fails(503, after=3.0, name="a"), fails(529, after=0.5, name="b")], hedge_after=1.0
        )(request_of())
    assert caught.value.providers == ("a", "b")  # in provider order, not finishing order


async def test_a_non_transient_failure_while_hedging_cancels_the_rest_and_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = answers("slow", after=10.0, name="slow")
    with pytest.raises(ProviderRequestError):
        await fallover([slow, fails(401, after=0.5, name="auth")], hedge_after=1.0)(request_of())
    assert len(slow.cancelled) == 1


async def test_hedge_after_zero_starts_everyone_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, b, c = (answers(n, after=t, name=n) for n, t in (("a", 3.0), ("b", 1.0), ("c", 2.0)))
    response = await fallover([a, b, c], hedge_after=0)(request_of())
    assert response.content == "b"
    assert sorted(response.metadata["operative.fallover"]["cancelled"]) == ["a", "c"]


async def test_cancelling_the_caller_cancels_every_attempt_and_leaves_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    providers = [answers(n, after=100.0, name=n) for n in "abc"]
    generate = fallover(providers, hedge_after=1.0)
    seen_running: list[str] = []

    async def watch() -> None:
        await trio.sleep(4.0)
        seen_running.extend(fallover_tasks())

    begin = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.move_on_after(5.0) as scope:
            await generate(request_of())
    assert scope.cancelled_caught
    assert trio.current_time() - begin == 5.0  # promptly: no attempt outlived the caller
    assert sorted(seen_running) == ["fallover a", "fallover b", "fallover c"]
    assert [len(p.cancelled) for p in providers] == [1, 1, 1]
    assert fallover_tasks() == []


async def test_cancelling_the_caller_during_the_first_attempt_starts_no_other(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first, second = answers("a", after=100.0, name="a"), answers("b", name="b")
    with trio.move_on_after(0.5):
        await fallover([first, second], hedge_after=1.0)(request_of())
    assert len(first.cancelled) == 1
    assert second.calls == 0


async def test_a_hedged_fallover_answers_an_agent_from_the_faster_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow, fast = answers("slow", after=30.0, name="slow"), answers("fast", after=0.5, name="fast")
    agent = create_agent(
        generate=fallover([slow, fast], hedge_after=2.0), retry=RetryOptions(max_attempts=1)
    )
    result = await agent.run("hi")
    assert result.content == "fast"
    assert result.conversation.messages[-1].metadata["operative.provider"] == "fast"


async def test_a_generate_returning_junk_is_left_for_the_loop_to_report() -> None:
    async def junk(request: GenerateRequest) -> GenerateResponse:
        return "not a response"  # type: ignore[return-value]

    assert await fallover([junk])(request_of()) == "not a response"  # type: ignore[comparison-overlap]


async def test_the_run_announces_which_provider_answered() -> None:
    """A run over a fallover emits generate.routed naming the winner and the failures."""
    from operative import Conversation, open_run, stop_when
    from operative.providers import fallover as make_fallover
    from operative.providers.test import MockProvider
    from operative.providers.test import provider_error as make_error

    primary = MockProvider(lambda request: make_error(529), name="primary")
    backup = MockProvider(lambda request: "from the backup", name="backup")
    conversation = Conversation()
    conversation.append_user_message("hi")
    routed: list[object] = []
    async with open_run(
        generate=make_fallover([primary, backup]),
        conversation=conversation,
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        run.add_listener("generate.routed", routed.append)
    result = await run.result()
    assert result.content == "from the backup"
    (event,) = routed
    assert event.provider == "backup"  # type: ignore[attr-defined]
    assert event.failed == ("primary",)  # type: ignore[attr-defined]


# -- retry budgets ------------------------------------------------------------------


def flaky(
    *failures: int, answer: str = "ok", name: str = "mock", retry_after: float | None = None
) -> tuple[MockProvider, list[float]]:
    """Fails with each status in turn, then answers; also returns when each call began."""
    pending = list(failures)
    calls: list[float] = []

    async def handler(request: GenerateRequest) -> str | Exception:
        calls.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        if pending:
            return provider_error(pending.pop(0), provider=name, retry_after=retry_after)
        return answer

    return MockProvider(handler, name=name), calls


NO_JITTER = RetryOptions(max_attempts=3, initial_delay=1.0, multiplier=2.0, jitter=False)


async def test_a_transient_failure_is_retried_at_the_same_provider_with_back_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, times = flaky(529, 503, answer="from primary", name="primary")
    backup = answers("from backup", name="backup")
    begin = trio.current_time()
    response = await fallover([primary, backup], retry=NO_JITTER)(request_of())
    assert response.content == "from primary"
    assert [t - begin for t in times] == [0.0, 1.0, 3.0]
    assert backup.calls == 0
    record = response.metadata["operative.fallover"]
    assert record["failed"] == []
    assert [(r["provider"], r["attempt"], r["delay"]) for r in record["retried"]] == [
        ("primary", 1, 1.0),
        ("primary", 2, 2.0),
    ]
    assert "ProviderUnavailableError" in record["retried"][0]["error"]
    assert [r.attempt for r in primary.requests] == [1, 1, 1]  # the run's attempt number


async def test_an_exhausted_budget_falls_over_to_the_next_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, times = flaky(503, 503, 503, name="primary")
    backup, backup_times = flaky(answer="from backup", name="backup")
    begin = trio.current_time()
    retry = RetryOptions(max_attempts=2, initial_delay=0.5, jitter=False)
    response = await fallover([primary, backup], retry=retry)(request_of())
    assert response.content == "from backup"
    assert [t - begin for t in times] == [0.0, 0.5]
    assert [t - begin for t in backup_times] == [0.5]
    record = response.metadata["operative.fallover"]
    assert [f["provider"] for f in record["failed"]] == ["primary"]
    assert len(record["retried"]) == 1


async def test_retry_after_is_honoured_and_a_long_one_falls_over_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, times = flaky(429, name="primary", retry_after=5.0)
    begin = trio.current_time()
    response = await fallover([primary, answers("b", name="b")], retry=NO_JITTER)(request_of())
    assert response.metadata["operative.provider"] == "primary"
    assert [t - begin for t in times] == [0.0, 5.0]  # the server's wait, not the back-off

    slow_down, slow_times = flaky(429, name="primary", retry_after=120.0)
    backup, backup_times = flaky(answer="from backup", name="backup")
    begin = trio.current_time()
    retry = RetryOptions(max_attempts=5, max_delay=30.0)
    response = await fallover([slow_down, backup], retry=retry)(request_of())
    assert response.content == "from backup"
    assert [t - begin for t in slow_times] == [0.0]  # 120 s is past max_delay: no wait
    assert [t - begin for t in backup_times] == [0.0]
    assert response.metadata["operative.fallover"]["retried"] == []


async def test_each_entry_may_carry_its_own_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, _ = flaky(503, 503, 503, 503, name="a")
    b, _ = flaky(503, 503, name="b")
    c, _ = flaky(503, answer="from c", name="c")
    d = answers("from d", name="d")
    generate = fallover(
        [(a, RetryOptions(max_attempts=4, initial_delay=0)), (b, None), c, d],
        retry=RetryOptions(max_attempts=2, initial_delay=0),
    )
    response = await generate(request_of())
    assert response.content == "from c"
    assert (a.calls, b.calls, c.calls, d.calls) == (4, 1, 2, 0)
    assert generate.retries[1] is None

    e, _ = flaky(503, answer="from e", name="e")
    by_name = fallover({"first": (e, RetryOptions(max_attempts=2, initial_delay=0)), "second": d})
    assert (await by_name(request_of())).content == "from e"
    assert by_name.names == ("first", "second")
    assert by_name.retries[1] is None


async def test_errors_the_budget_does_not_retry_are_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bad, _ = flaky(400, name="bad")
    backup = answers("b", name="b")
    with pytest.raises(ProviderRequestError):
        await fallover([bad, backup], retry=NO_JITTER)(request_of())
    assert (bad.calls, backup.calls) == (1, 0)

    only_429 = RetryOptions(max_attempts=3, initial_delay=0, retry_on=lambda e: False)
    busy, _ = flaky(503, name="busy")
    assert (await fallover([busy, backup], retry=only_429)(request_of())).content == "b"
    assert busy.calls == 1


async def test_attempt_timeout_bounds_each_call_at_a_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hanging = answers("never", after=100.0, name="hanging")
    backup, backup_times = flaky(answer="from backup", name="backup")
    retry = RetryOptions(max_attempts=2, initial_delay=1.0, jitter=False, attempt_timeout=2.0)
    begin = trio.current_time()
    response = await fallover([hanging, backup], retry=retry)(request_of())
    assert response.content == "from backup"
    assert hanging.calls == 2
    assert [t - begin for t in backup_times] == [5.0]  # 2 s, 1 s back-off, 2 s
    assert "TooSlowError" in response.metadata["operative.fallover"]["failed"][0]["error"]


async def test_the_budgets_mutators_change_the_retried_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from operative.retry import fallback_model

    primary, _ = flaky(529, name="primary")
    retry = RetryOptions(max_attempts=2, initial_delay=0, mutators=[fallback_model("small")])
    await fallover([primary], retry=retry)(request_of())
    assert [r.settings.get("model") for r in primary.requests] == [None, "small"]
    assert [r.attempt for r in primary.requests] == [1, 1]


async def test_every_budget_spent_raises_all_providers_failed_with_the_last_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, _ = flaky(503, 529, name="a")
    b, _ = flaky(500, 429, name="b")
    with pytest.raises(AllProvidersFailed) as caught:
        await fallover([a, b], retry=RetryOptions(max_attempts=2, initial_delay=0))(request_of())
    assert caught.value.providers == ("a", "b")
    assert [getattr(e, "status", None) for e in caught.value.exceptions] == [529, 429]


async def test_hedging_races_a_provider_that_is_backing_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The hedge timer counts from a provider's first call, retries included; the winner
    cancels a loser's back-off sleep."""
    primary, times = flaky(529, 529, name="primary")
    backup, backup_times = flaky(answer="from backup", name="backup")
    retry = RetryOptions(max_attempts=3, initial_delay=10.0, jitter=False)
    begin = trio.current_time()
    response = await fallover([primary, backup], retry=retry, hedge_after=0.5)(request_of())
    assert response.content == "from backup"
    assert trio.current_time() - begin == 0.5
    assert [t - begin for t in times] == [0.0]
    assert [t - begin for t in backup_times] == [0.5]
    record = response.metadata["operative.fallover"]
    assert record["cancelled"] == ["primary"]
    assert record["failed"] == []
    assert fallover_tasks() == []

    quick, quick_times = flaky(503, answer="from quick", name="quick")
    slow = answers("slow", after=50.0, name="slow")
    retry = RetryOptions(max_attempts=2, initial_delay=1.0, jitter=False)
    begin = trio.current_time()
    response = await fallover([quick, slow], retry=retry, hedge_after=0.5)(request_of())
    assert response.content == "from quick"  # its retry answered before the hedge did
    assert [t - begin for t in quick_times] == [0.0, 1.0]
    assert len(slow.cancelled) == 1


async def test_cancelling_the_caller_cancels_a_back_off_sleep(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for hedge_after in (None, 1.0):
        primary, times = flaky(529, 529, name="primary")
        backup = answers("b", after=100.0, name="backup")
        retry = RetryOptions(max_attempts=3, initial_delay=60.0, jitter=False)
        begin = trio.current_time()
        with trio.move_on_after(3.0) as scope:
            await fallover([primary, backup], retry=retry, hedge_after=hedge_after)(request_of())
        assert scope.cancelled_caught
        assert trio.current_time() - begin == 3.0
        assert len(times) == 1
        assert fallover_tasks() == []


async def test_a_fallover_with_budgets_answers_an_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, _ = flaky(529, 529, 529, name="primary")
    backup, _ = flaky(503, answer="from backup", name="backup")
    agent = create_agent(
        generate=fallover([primary, backup], retry=RetryOptions(max_attempts=2)),
        retry=RetryOptions(max_attempts=1),
    )
    result = await agent.run("hi")
    assert result.content == "from backup"
    assert (primary.calls, backup.calls) == (2, 2)
    record = result.conversation.messages[-1].metadata["operative.fallover"]
    assert [r["provider"] for r in record["retried"]] == ["primary", "backup"]


def test_bad_retry_budgets_are_rejected_eagerly() -> None:
    ok = answers("x")
    with pytest.raises(InvalidArgument):
        fallover([ok], retry=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        fallover([(ok, 3)])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        fallover([(ok, RetryOptions(), None)])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        fallover({"a": (ok, "x")})  # type: ignore[dict-item]
    assert "retries=" in repr(fallover([ok], retry=RetryOptions()))
    assert "retries=" not in repr(fallover([ok]))
