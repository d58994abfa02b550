"""What a structured-output answer that does not validate is told: words the model can
act on, built from what the answer is (not from msgspec's error text)."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec
import pytest

from operative import create_agent
from operative._core._output import validate_output
from operative.testing import ScriptedModel


class Capital(msgspec.Struct):
    city: str
    population: int
    note: str = ""


@attrs.frozen
class Verdict:
    approved: bool


WANTED = 'the JSON object with the fields "city", "population" that the output type asks for'


def error_of(content: str, output: Any = Capital) -> str:
    ok, value, error = validate_output(content, output)
    assert not ok
    assert value is None
    assert error is not None
    return error


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            "[Paris] is the capital of France",
            f"the answer is not {WANTED}: it is not valid JSON at line 1, column 2 "
            "(Expecting value): 'Paris] is the capital of France'",
        ),
        ("[1, 2]", f"the answer is a JSON array, not {WANTED}"),
        ('"Paris"', f"the answer is a JSON string, not {WANTED}"),
        ("12", f"the answer is a JSON number, not {WANTED}"),
        ("null", f"the answer is JSON null, not {WANTED}"),
        (
            "The capital is Paris.",
            f"the answer is not {WANTED}: it is not valid JSON (it begins 'The capital is Paris.')",
        ),
        (
            '{"city": "Paris", "population": 2100000} Hope this helps!',
            "the answer has text after its JSON (from 'Hope this helps!'): the output type "
            'asks for the JSON object with the fields "city", "population" alone, without '
            "prose around it",
        ),
        (
            '{"city": "Paris", "popul',
            f"the answer is not {WANTED}: it is not valid JSON at line 1, column 19 "
            "(Unterminated string starting at): '\"popul'",
        ),
        (
            '{"city": "Paris", ',
            f"the answer is not {WANTED}: it is not valid JSON at line 1, column 18 "
            "(Expecting property name enclosed in double quotes): where the text ends",
        ),
        ("   ", f"the answer is empty, not {WANTED}"),
        ("[" * 100_000, f"the answer is not {WANTED}: it nests too deeply to read"),
        ('{"a":' * 100_000, f"the answer is not {WANTED}: it nests too deeply to read"),
    ],
    ids=[
        "prose starting with [",
        "array",
        "string",
        "number",
        "null",
        "prose",
        "text after the JSON",
        "cut mid-string",
        "cut after a comma",
        "blank",
        "deep array",
        "deep object",
    ],
)
def test_an_answer_that_is_not_the_json_asked_for_is_told_so(answer: str, expected: str) -> None:
    """The message says the answer is not the JSON object asked for, and why (never
    msgspec's "Expected `object`, got `array`" for prose that starts with ``[``)."""
    error = error_of(answer)
    assert error == expected
    assert "Expected `object`" not in error


def test_json_of_the_right_kind_names_the_path_of_the_wrong_value() -> None:
    """An object with a wrong field still gets msgspec's own account, with its path."""
    error = error_of('{"city": 75, "population": 2}')
    assert error == "the JSON does not fit the output type: Expected `str`, got `int` - at `$.city`"


@pytest.mark.parametrize(
    ("output", "answer", "expected"),
    [
        (
            list[int],
            '{"a": 1}',
            "the answer is a JSON object, not the JSON array the output type asks for",
        ),
        (
            list[int],
            "[one, two]",
            "the answer is not the JSON array the output type asks for: it is not valid JSON "
            "at line 1, column 2 (Expecting value): 'one, two]'",
        ),
        (
            int | None,
            "[1]",
            "the answer is a JSON array, not the JSON number or null the output type asks for",
        ),
        (
            Verdict,
            "[true]",
            'the answer is a JSON array, not the JSON object with the fields "approved" that '
            "the output type asks for",
        ),
    ],
    ids=["array wanted", "array wanted, prose", "optional number", "attrs class"],
)
def test_what_is_asked_for_follows_the_output_type(output: Any, answer: str, expected: str) -> None:
    """Arrays, unions and attrs classes are described by their schema's top level."""
    assert error_of(answer, output) == expected


def test_an_integer_answers_a_number_and_a_fenced_answer_is_read() -> None:
    """``3`` is a valid ``float`` output, and a code fence around the JSON is tolerated."""
    assert validate_output("3", float) == (True, 3.0, None)
    fenced = '```json\n{"city": "Paris", "population": 2}\n```'
    assert validate_output(fenced, Capital) == (True, Capital("Paris", 2), None)


async def test_the_model_is_told_what_its_answer_is() -> None:
    """In a run, the retry message carries the explanation; the second answer is accepted."""
    model = ScriptedModel(["[Paris] is the capital.", '{"city": "Paris", "population": 2100000}'])
    agent = create_agent(generate=model, output=Capital, schema_retries=1)
    result = await agent.run("What is the capital of France?")
    assert result.output == Capital("Paris", 2_100_000)
    feedback = model.requests[1].conversation.messages[-1]
    assert feedback.role == "user"
    assert f"the answer is not {WANTED}: it is not valid JSON" in feedback.text
    assert "Expected `object`" not in feedback.text
