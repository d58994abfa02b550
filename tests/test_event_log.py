"""Structured logging: one JSON line per run event through the logging module."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from operative import Conversation, InvalidArgument, open_run, stop_when
from operative.event_log import event_logger, log_events
from operative.providers import Delta
from operative.providers.test import StreamChunk, StreamReplayer
from operative.testing import ScriptedModel


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("hello")
    return conversation


async def test_every_event_is_one_json_line(caplog: pytest.LogCaptureFixture) -> None:
    """Each record's message is the event as JSON, with run id and step on the record."""
    caplog.set_level(logging.INFO, logger="operative.events")
    async with open_run(
        generate=ScriptedModel(["hi"]),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
        run_id="run-1",
    ) as run:
        remove = log_events(run)
    records = [r for r in caplog.records if r.name == "operative.events"]
    lines = [record.getMessage() for record in records]
    assert all("\n" not in line for line in lines)
    events = [json.loads(line) for line in lines]
    assert events[0]["type"] == "run.started"
    assert events[-1]["type"] == "run.completed"
    assert {event["run_id"] for event in events} == {"run-1"}
    step_started = next(r for r in records if getattr(r, "event_type", "") == "step.started")
    assert getattr(step_started, "run_id", None) == "run-1"
    assert getattr(step_started, "step", None) == 1
    assert all(record.levelno == logging.INFO for record in records)
    remove()


async def test_types_level_and_logger_are_chosen(
    caplog: pytest.LogCaptureFixture, autojump_clock: Any
) -> None:
    """Only the chosen types, at the chosen level, on the chosen logger."""
    caplog.set_level(logging.DEBUG, logger="host.audit")
    async with open_run(
        generate=ScriptedModel(["hi"]),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        log_events(run, logger="host.audit", level="debug", types=["run.completed"])
    records = [r for r in caplog.records if r.name == "host.audit"]
    assert [getattr(r, "event_type", None) for r in records] == ["run.completed"]
    assert records[0].levelno == logging.DEBUG


async def test_deltas_are_left_out_by_default(
    caplog: pytest.LogCaptureFixture, autojump_clock: Any
) -> None:
    """generate.delta is excluded unless asked for."""
    caplog.set_level(logging.INFO, logger="operative.events")
    model = StreamReplayer([StreamChunk(delta=Delta(kind="text", text="hi"), gap=0.1)])
    async with open_run(
        generate=model, conversation=_conversation(), stop_when=stop_when.no_tool_calls()
    ) as run:
        log_events(run)
    types = [getattr(r, "event_type", None) for r in caplog.records]
    assert "generate.delta" not in types
    assert "generate.completed" in types

    caplog.clear()
    async with open_run(
        generate=StreamReplayer([StreamChunk(delta=Delta(kind="text", text="hi"), gap=0.1)]),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        log_events(run, exclude=())
    assert "generate.delta" in [getattr(r, "event_type", None) for r in caplog.records]


async def test_nothing_is_encoded_when_the_logger_is_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A disabled level produces no records (and no encoding work)."""
    caplog.set_level(logging.WARNING, logger="operative.events")
    async with open_run(
        generate=ScriptedModel(["hi"]),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        run.add_listener("*", event_logger(level=logging.INFO))
    assert [r for r in caplog.records if r.name == "operative.events"] == []


def test_bad_arguments_are_refused() -> None:
    """Unknown types, loggers and levels fail at once."""

    class Run:
        def add_listener(self, type: str, listener: Any) -> Any:
            return lambda: None

    with pytest.raises(InvalidArgument, match="unknown event type"):
        log_events(Run(), types=["step.done"])
    with pytest.raises(InvalidArgument, match="logger="):
        log_events(Run(), logger=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="level="):
        event_logger(level="LOUD")
    with pytest.raises(InvalidArgument, match="level="):
        event_logger(level=True)
