"""The tools the MCP conformance suite's server scenarios call, written as operative tools.

Served with ``python -m operative mcp serve conformance_tools:tools --http 127.0.0.1:0``
(run from this directory) by tests/mcp_tests/test_conformance.py. Each tool does what its
scenario's description asks, with nothing but operative's own API: return values become
content (text, content parts, structured JSON), ``report_progress`` becomes progress
notifications, ``elicit`` becomes ``elicitation/create``, a raised error an ``isError``
result. Scenarios that need what operative's server does not offer (prompts, resources,
completion, logging, sampling, SSE stream resumption) have no tool here: see the known
failures in test_conformance.py.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Annotated, Any, Literal

import msgspec
import trio

import operative
from operative import ToolContext


def _png() -> str:
    """A 1x1 red pixel PNG, base64."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
    return base64.b64encode(png + chunk(b"IEND", b"")).decode()


def _wav() -> str:
    """A tenth of a second of silence, 8 kHz mono 8-bit WAV, base64."""
    samples = b"\x80" * 800
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 8000, 1, 8)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(samples)) + samples
    return base64.b64encode(b"RIFF" + struct.pack("<I", len(body)) + body).decode()


PNG = _png()
WAV = _wav()


@operative.tool
async def test_simple_text() -> str:
    """Returns a simple text response."""
    return "This is a simple text response for testing."


@operative.tool
async def test_image_content() -> list[dict[str, str]]:
    """Returns a 1x1 red PNG image."""
    return [{"type": "image", "data": PNG, "mime_type": "image/png"}]


@operative.tool
async def test_audio_content() -> list[dict[str, str]]:
    """Returns a short silent WAV clip."""
    return [{"type": "audio", "data": WAV, "mime_type": "audio/wav"}]


@operative.tool
async def test_embedded_resource() -> list[dict[str, str]]:
    """Returns an embedded text resource."""
    return [
        {
            "type": "resource",
            "uri": "test://embedded-resource",
            "mime_type": "text/plain",
            "text": "This is an embedded resource content.",
        }
    ]


@operative.tool
async def test_multiple_content_types() -> list[dict[str, str]]:
    """Returns text, an image and an embedded resource."""
    return [
        {"type": "text", "text": "Multiple content types test:"},
        {"type": "image", "data": PNG, "mime_type": "image/png"},
        {
            "type": "resource",
            "uri": "test://mixed-content-resource",
            "mime_type": "application/json",
            "text": '{"test":"data","value":123}',
        },
    ]


@operative.tool
async def test_error_handling() -> str:
    """Always fails."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@operative.tool
async def test_tool_with_progress(context: ToolContext) -> str:
    """Reports progress 0, 50 and 100 of 100, 50 ms apart."""
    await context.report_progress(0, 100)
    await trio.sleep(0.05)
    await context.report_progress(50, 100)
    await trio.sleep(0.05)
    await context.report_progress(100, 100)
    return "Progress reported: 0, 50, 100 of 100"


class UserInfo(msgspec.Struct):
    username: Annotated[str, msgspec.Meta(description="User's response")]
    email: Annotated[str, msgspec.Meta(description="User's email address")]


@operative.tool
async def test_elicitation(message: str, context: ToolContext) -> str:
    """Asks the user for a username and an email address."""
    answer = await context.elicit(message, UserInfo)
    if answer is None:
        return "User response: action=decline"
    return f"User response: action=accept, content={msgspec.to_builtins(answer)}"


class Defaults(msgspec.Struct):
    name: str = "John Doe"
    age: int = 30
    score: float = 95.5
    status: Literal["active", "inactive", "pending"] = "active"
    verified: bool = True


@operative.tool
async def test_elicitation_sep1034_defaults(context: ToolContext) -> str:
    """Asks for values whose schema carries defaults of every primitive type."""
    answer = await context.elicit("Please review your profile", Defaults)
    action = "decline" if answer is None else "accept"
    return f"Elicitation completed: action={action}, content={msgspec.to_builtins(answer)}"


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


class Enums(msgspec.Struct):
    untitledSingle: Literal["option1", "option2", "option3"]  # the suite's names
    titledSingle: Annotated[
        str,
        msgspec.Meta(
            extra_json_schema={
                "oneOf": _titled(
                    ("value1", "First Option"),
                    ("value2", "Second Option"),
                    ("value3", "Third Option"),
                )
            }
        ),
    ]
    legacyEnum: Annotated[
        Literal["opt1", "opt2", "opt3"],
        msgspec.Meta(extra_json_schema={"enumNames": ["Option One", "Option Two", "Option Three"]}),
    ]
    untitledMulti: list[Literal["option1", "option2", "option3"]]
    titledMulti: list[
        Annotated[
            str,
            msgspec.Meta(
                extra_json_schema={
                    "anyOf": _titled(
                        ("value1", "First Choice"),
                        ("value2", "Second Choice"),
                        ("value3", "Third Choice"),
                    )
                }
            ),
        ]
    ]


@operative.tool
async def test_elicitation_sep1330_enums(context: ToolContext) -> str:
    """Asks for choices in each of the five enum shapes."""
    answer = await context.elicit("Please choose", Enums)
    action = "decline" if answer is None else "accept"
    return f"Elicitation completed: action={action}, content={msgspec.to_builtins(answer)}"


SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


async def _describe(name: str | None = None, address: dict[str, Any] | None = None) -> str:
    return f"name={name}, address={address}"


json_schema_2020_12_tool = operative.Tool(
    _describe,
    name="json_schema_2020_12_tool",
    description="Tool with JSON Schema 2020-12 features",
    input_schema=SCHEMA_2020_12,
)

tools = [
    test_simple_text,
    test_image_content,
    test_audio_content,
    test_embedded_resource,
    test_multiple_content_types,
    test_error_handling,
    test_tool_with_progress,
    test_elicitation,
    test_elicitation_sep1034_defaults,
    test_elicitation_sep1330_enums,
    json_schema_2020_12_tool,
]
