"""No JSON Schema operative is given ever makes it fetch a ``$ref``.

Every schema path (a tool's hand-written ``input_schema``, a derived one, an AG-UI
client's tool parameters, an MCP server's input, output and form schemas, an output
type's schema) is pointed at a real HTTP server on 127.0.0.1 that counts the requests
it gets and serves a schema holding a secret, and at a real file on disk holding
another: each is refused with a typed error where the schema is given, the server gets
no request, and no secret shows up anywhere. ``#/$defs/...`` references keep working.

The first tests are the control: jsonschema's own default resolver does fetch both, so
the counting server and the file would see a regression.
"""

from __future__ import annotations

import http.server
import json
import logging
import sys
import threading
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import attrs
import jsonschema
import mcp_types as types
import msgspec
import pytest
import trio

from operative import InvalidArgument, OperativeError, ToolCall, create_agent
from operative.mcp import MCPServer
from operative.mcp._elicitation import form_validator
from operative.mcp._tools import make_tool
from operative.testing import ScriptedModel
from operative.tools import (
    ElicitationError,
    ElicitationRequest,
    ElicitationResponse,
    ExecutionContext,
    Tool,
    Toolbox,
    ToolDefinitionError,
    tool,
)
from operative.tools._schema import check_local_refs, compile_schema
from operative.ui import AguiInputError, frontend_tools, parse_agui_input
from operative.ui._agui_input import AguiTool

HTTP_SECRET = "served-over-http-3f9c1a"
FILE_SECRET = "read-from-disk-8d2e47"
REFUSED = r"points outside the schema.*inline the definition under `\$defs`"


@attrs.define
class SchemaServer:
    """A real HTTP server on 127.0.0.1 that serves a schema and counts its requests."""

    port: int
    requests: list[str] = attrs.field(factory=list)

    def url(self, name: str = "schema.json") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"


@pytest.fixture
def schema_server() -> Iterator[SchemaServer]:
    served: SchemaServer | None = None

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            assert served is not None
            served.requests.append(self.path)
            body = json.dumps({"type": "string", "const": HTTP_SECRET}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served = SchemaServer(port=httpd.server_address[1])
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def schema_file(tmp_path: Path) -> str:
    """The ``file:`` URL of a schema on disk."""
    path = tmp_path / "secret-schema.json"
    path.write_text(json.dumps({"type": "string", "const": FILE_SECRET}))
    return path.as_uri()


@pytest.fixture
def no_urlopen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``urllib.request.urlopen`` call (jsonschema's default retrieval uses it, for
    ``http:`` and ``file:`` alike); none is let through."""
    opened: list[str] = []

    def urlopen(request: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(getattr(request, "full_url", str(request)))
        raise AssertionError(f"a schema reference was fetched: {opened[-1]}")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return opened


def _nested(ref: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"city": {"$ref": ref}}, "required": ["city"]}


LOCAL = {
    "type": "object",
    "properties": {"city": {"$ref": "#/$defs/city"}, "tags": {"$ref": "#/$defs/tags"}},
    "required": ["city"],
    "$defs": {
        "city": {"type": "string", "minLength": 2},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/city"}},
    },
}


def _remote_field(name: str, url: str) -> type[msgspec.Struct]:
    """A Struct whose one string field's schema an ``extra_json_schema`` points at ``url``
    (built at run time: this module's annotations are strings, evaluated too late)."""
    sneaky = Annotated[str, msgspec.Meta(extra_json_schema={"$ref": url})]
    return msgspec.defstruct(name, [("city", sneaky)])


def _no_secret(exc: BaseException) -> None:
    assert HTTP_SECRET not in str(exc)
    assert FILE_SECRET not in str(exc)


# -- the control: jsonschema alone fetches both -------------------------------------------


def test_control_jsonschemas_default_resolver_fetches_from_the_counting_server(
    schema_server: SchemaServer,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        validator = jsonschema.Draft202012Validator(_nested(schema_server.url()))
        errors = [error.message for error in validator.iter_errors({"city": "Paris"})]
    assert schema_server.requests == ["/schema.json"]
    assert any(HTTP_SECRET in message for message in errors)


def test_control_jsonschemas_default_resolver_reads_a_file_ref(schema_file: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        validator = jsonschema.Draft202012Validator(_nested(schema_file))
        errors = [error.message for error in validator.iter_errors({"city": "Paris"})]
    assert any(FILE_SECRET in message for message in errors)


# -- tools --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["http", "file"])
def test_a_tool_decorator_input_schema_with_a_remote_ref_is_refused_when_defined(
    where: str, schema_server: SchemaServer, schema_file: str, no_urlopen: list[str]
) -> None:
    ref = schema_server.url() if where == "http" else schema_file
    with pytest.raises(ToolDefinitionError, match=REFUSED) as raised:

        @tool(input_schema=_nested(ref))
        async def weather(city: str) -> str:
            """The weather in a city."""
            return "sunny"

    message = str(raised.value)
    assert "tool 'weather': input_schema" in message
    assert repr(ref) in message
    assert "`$.properties.city`" in message
    _no_secret(raised.value)
    assert schema_server.requests == []
    assert no_urlopen == []


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "object", "$ref": "{url}"}, id="root-ref"),
        pytest.param(
            {"type": "object", "properties": {"a": {"anyOf": [{"$ref": "{url}#/x"}]}}},
            id="ref-with-pointer-under-anyOf",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"items": {"$dynamicRef": "{url}"}}}},
            id="dynamicRef",
        ),
        pytest.param(
            {"type": "object", "$defs": {"a": {"not": {"$ref": "{url}"}}}},
            id="ref-in-an-unused-def",
        ),
        pytest.param(
            {"$id": "{base}root.json", "type": "object", "properties": {"a": {"$ref": "x.json"}}},
            id="relative-ref-against-the-servers-id",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"$ref": "sibling.json"}}},
            id="relative-ref-without-an-id",
        ),
    ],
)
def test_a_tool_defined_from_a_json_schema_refuses_every_ref_outside_it(
    schema: dict[str, Any], schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    url, base = schema_server.url(), schema_server.url("")
    filled = json.loads(json.dumps(schema).replace("{url}", url).replace("{base}", base))

    async def lookup(arguments: dict[str, Any]) -> str:
        """Look it up."""
        return "found"

    with pytest.raises(ToolDefinitionError, match=REFUSED) as raised:
        Tool(lookup, input_type=dict[str, Any], input_schema=filled)
    assert "tool 'lookup': input_schema" in str(raised.value)
    assert schema_server.requests == []
    assert no_urlopen == []


def test_the_one_compiler_refuses_with_the_error_type_and_place_it_is_given(
    schema_server: SchemaServer,
) -> None:
    class Refused(OperativeError):
        pass

    with pytest.raises(Refused, match=r"^the test schema: \$ref .* at `\$.properties.city`"):
        compile_schema(_nested(schema_server.url()), where="the test schema", error=Refused)
    assert schema_server.requests == []


def test_a_derived_input_schema_with_a_remote_ref_is_refused(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    async def greet(name: str) -> str:
        """Greet someone."""
        return f"hello {name}"

    sneaky = Annotated[str, msgspec.Meta(extra_json_schema={"$ref": schema_server.url()})]
    greet.__annotations__ = {"name": sneaky, "return": str}
    with pytest.raises(ToolDefinitionError, match=REFUSED) as raised:
        Tool(greet)
    assert "input of tool 'greet'" in str(raised.value)
    with pytest.raises(ToolDefinitionError, match=REFUSED):
        Tool(greet, input_type=_remote_field("Greeting", schema_server.url()))
    assert schema_server.requests == []
    assert no_urlopen == []


def test_a_remote_dollar_schema_is_not_fetched(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    """An unknown ``$schema`` is validated as draft 2020-12, never downloaded."""
    schema = {**LOCAL, "$schema": schema_server.url("meta.json")}

    async def visit(arguments: dict[str, Any]) -> str:
        """Visit it."""
        return "ok"

    Tool(visit, input_type=dict[str, Any], input_schema=schema)
    assert schema_server.requests == []
    assert no_urlopen == []


async def test_local_refs_into_defs_still_validate_calls(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    calls: list[dict[str, Any]] = []

    async def visit(arguments: dict[str, Any]) -> str:
        """Visit it."""
        calls.append(arguments)
        return "visited"

    toolbox = Toolbox([Tool(visit, input_type=dict[str, Any], input_schema=LOCAL)])
    ok = await toolbox.execute(
        ToolCall(id="c1", name="visit", arguments={"city": "Paris", "tags": ["Lyon"]})
    )
    assert (ok.outcome, ok.value) == ("success", "visited")
    bad = await toolbox.execute(
        ToolCall(id="c2", name="visit", arguments={"city": "Paris", "tags": ["X"]})
    )
    assert bad.outcome == "error"
    assert bad.error is not None
    assert "'X' is too short" in bad.error
    assert "`$.tags[0]`" in bad.error
    assert calls == [{"city": "Paris", "tags": ["Lyon"]}]
    assert schema_server.requests == []
    assert no_urlopen == []


async def test_refs_to_ids_and_anchors_inside_the_schema_are_local(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    """A ``$ref`` that resolves to an ``$id`` or anchor the schema defines itself is
    local, even written as an absolute URL on the counting server."""
    base = schema_server.url("")
    schema = {
        "$id": f"{base}root.json",
        "type": "object",
        "properties": {
            "a": {"$ref": f"{base}root.json#/$defs/count"},
            "b": {"$ref": "name.json"},
            "c": {"$ref": "#flag"},
        },
        "$defs": {
            "count": {"type": "integer"},
            "name": {"$id": "name.json", "type": "string"},
            "flag": {"$anchor": "flag", "type": "boolean"},
        },
    }
    validator = compile_schema(schema, where="the test schema")
    assert list(validator.iter_errors({"a": 1, "b": "x", "c": True})) == []
    wrong = sorted(error.message for error in validator.iter_errors({"a": "1", "b": 2, "c": 3}))
    assert wrong == [
        "'1' is not of type 'integer'",
        "2 is not of type 'string'",
        "3 is not of type 'boolean'",
    ]
    assert schema_server.requests == []
    assert no_urlopen == []


async def test_a_ref_slipping_past_the_check_is_still_never_fetched(
    schema_server: SchemaServer,
    schema_file: str,
    no_urlopen: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second line: with the check switched off, the validator resolves in an empty
    registry, so a call against a remote ``$ref`` fails (an error result) unfetched."""
    import operative.tools._schema as schema_module

    monkeypatch.setattr(schema_module, "check_local_refs", lambda *args, **kwargs: None)

    async def lookup(arguments: dict[str, Any]) -> str:
        """Look it up."""
        return "found"

    for ref in (schema_server.url(), schema_file):
        toolbox = Toolbox([Tool(lookup, input_type=dict[str, Any], input_schema=_nested(ref))])
        result = await toolbox.execute(ToolCall(id="c1", name="lookup", arguments={"city": "x"}))
        assert result.outcome == "error"
        assert result.error is not None
        assert "could not be checked against its input schema" in result.error
        assert HTTP_SECRET not in result.error
        assert FILE_SECRET not in result.error
    assert schema_server.requests == []
    assert no_urlopen == []


def test_a_ref_inside_data_keywords_is_data_not_a_reference() -> None:
    """``const``, ``enum``, ``default`` and ``examples`` hold values: a ``$ref`` in
    them is never resolved, so it is not refused; a property named ``$ref`` is fine."""
    remote = {"$ref": "http://127.0.0.1:9/never"}
    check_local_refs(
        {
            "type": "object",
            "properties": {
                "a": {"const": remote, "default": remote, "examples": [remote]},
                "b": {"enum": [remote]},
                "$ref": {"type": "string"},
            },
        },
        where="the test schema",
    )


# -- AG-UI --------------------------------------------------------------------------------


def _agui_body(parameters: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "threadId": "t1",
            "runId": "r1",
            "messages": [{"id": "u1", "role": "user", "content": "hi"}],
            "tools": [
                {"name": "show_map", "description": "Shows a map.", "parameters": LOCAL},
                {"name": "probe", "description": "Probes.", "parameters": parameters},
            ],
        }
    ).encode()


@pytest.mark.parametrize("where", ["http", "file"])
def test_an_agui_client_tool_with_a_remote_ref_is_a_bad_request(
    where: str, schema_server: SchemaServer, schema_file: str, no_urlopen: list[str]
) -> None:
    """Refused while the request is parsed: an ``AguiInputError``, which the endpoint
    answers with HTTP 400 (before any tool is built or model called)."""
    ref = schema_server.url() if where == "http" else schema_file
    with pytest.raises(AguiInputError, match=REFUSED) as raised:
        parse_agui_input(_agui_body(_nested(ref)))
    assert "tools[1] ('probe'): parameters" in str(raised.value)
    _no_secret(raised.value)
    assert schema_server.requests == []
    assert no_urlopen == []


def test_frontend_tools_refuse_a_remote_ref_on_their_own(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    declared = AguiTool(
        name="probe", description="Probes.", parameters=_nested(schema_server.url())
    )
    with pytest.raises(ToolDefinitionError, match=REFUSED):
        frontend_tools([declared])
    assert schema_server.requests == []
    assert no_urlopen == []


def test_an_agui_client_tool_with_local_refs_is_offered(schema_server: SchemaServer) -> None:
    parsed = parse_agui_input(_agui_body({"type": "object", "properties": {}}))
    tools = frontend_tools(parsed.tools)
    assert [t.name for t in tools] == ["show_map", "probe"]
    assert tools[0].input_schema == LOCAL
    assert schema_server.requests == []


# -- MCP ----------------------------------------------------------------------------------


def _definition(**fields: Any) -> types.Tool:
    return types.Tool.model_validate({"name": "probe", "inputSchema": {"type": "object"}, **fields})


async def _never_called(remote: str, arguments: dict[str, Any], context: Any) -> Any:
    raise AssertionError("no call is made")


@pytest.mark.parametrize("field", ["inputSchema", "outputSchema"])
def test_an_mcp_tool_definition_with_a_remote_ref_is_refused_on_import(
    field: str, schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    definition = _definition(**{field: _nested(schema_server.url())})
    with pytest.raises(ToolDefinitionError, match=REFUSED) as raised:
        make_tool(definition, _never_called, prefix=None, timeout=None)
    assert f"the {field} of the tool 'probe'" in str(raised.value)
    assert schema_server.requests == []
    assert no_urlopen == []


async def test_an_mcp_servers_tools_with_remote_refs_are_left_out_and_never_fetched(
    schema_server: SchemaServer, schema_file: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Listed from a real stdio server: the tools whose schemas point at the counting
    server or at the file are left out (with the typed error's message in a warning),
    the others are offered, and the local one's input and output schemas still work."""
    command = [str(Path(__file__).with_name("_ref_server.py")), schema_server.url(), schema_file]
    caplog.set_level(logging.WARNING, logger="operative.mcp")
    async with MCPServer.stdio(sys.executable, command) as server:
        tools = {t.name: t for t in await server.list_tools()}
        assert sorted(tools) == ["ask", "local"]
        toolbox = Toolbox(list(tools.values()))
        ok = await toolbox.execute(ToolCall(id="c1", name="local", arguments={"n": 3}))
        bad = await toolbox.execute(ToolCall(id="c2", name="local", arguments={"n": -1}))
    assert (ok.outcome, ok.value) == ("success", {"n": 3})
    assert bad.outcome == "error"
    assert bad.error is not None
    assert "-1 is less than the minimum of 0" in bad.error
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for name, field in [
        ("remote_input", "inputSchema"),
        ("file_input", "inputSchema"),
        ("remote_output", "outputSchema"),
    ]:
        assert f"the {field} of the tool {name!r}" in warned
    assert "points outside the schema" in warned
    assert HTTP_SECRET not in warned
    assert FILE_SECRET not in warned
    assert schema_server.requests == []


# -- elicitation --------------------------------------------------------------------------


def test_an_mcp_form_schema_with_a_remote_ref_is_refused(
    schema_server: SchemaServer, schema_file: str, no_urlopen: list[str]
) -> None:
    for ref in (schema_server.url(), schema_file):
        with pytest.raises(ElicitationError, match=REFUSED) as raised:
            form_validator(_nested(ref), label="'refs'")
        assert "the form schema the MCP server 'refs' sent" in str(raised.value)
    assert schema_server.requests == []
    assert no_urlopen == []


async def test_an_mcp_elicitation_with_a_remote_ref_is_answered_with_an_error_unasked(
    schema_server: SchemaServer, schema_file: str
) -> None:
    """Over a real stdio server: the person is never asked, the server is told why, and
    the counting server gets nothing."""
    asked: list[ElicitationRequest] = []

    async def person(request: ElicitationRequest) -> ElicitationResponse:
        asked.append(request)
        await trio.lowlevel.checkpoint()
        return ElicitationResponse(
            request_id=request.request_id, tool_call_id=request.tool_call_id, data={}
        )

    command = [str(Path(__file__).with_name("_ref_server.py")), schema_server.url(), schema_file]
    async with MCPServer.stdio(sys.executable, command) as server:
        toolbox = Toolbox(await server.list_tools())
        context = ExecutionContext(on_elicitation=person)
        with trio.fail_after(30):
            result = await toolbox.execute(ToolCall(id="c1", name="ask", arguments={}), context)
    assert result.outcome == "success"
    reply = json.loads(result.value)
    assert "result" not in reply
    assert "points outside the schema" in reply["error"]["message"]
    assert HTTP_SECRET not in reply["error"]["message"]
    assert asked == []
    assert schema_server.requests == []


def test_a_tool_elicitation_type_with_a_remote_ref_is_refused(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    from operative.tools._elicitation import elicitation_schema

    with pytest.raises(ElicitationError, match=REFUSED):
        elicitation_schema(_remote_field("Answer", schema_server.url()))
    assert schema_server.requests == []
    assert no_urlopen == []


# -- output types -------------------------------------------------------------------------


def test_an_output_type_with_a_remote_ref_is_refused_when_given(
    schema_server: SchemaServer, no_urlopen: list[str]
) -> None:
    report = _remote_field("Report", schema_server.url())
    with pytest.raises(InvalidArgument, match=REFUSED) as raised:
        create_agent(generate=ScriptedModel(["{}"]), output=report)
    assert "the JSON Schema of output=" in str(raised.value)
    assert schema_server.requests == []
    assert no_urlopen == []


class City(msgspec.Struct):
    name: str


class Report(msgspec.Struct):
    cities: list[City]
    capital: City


async def test_an_output_type_with_local_refs_is_accepted_and_answers() -> None:
    """msgspec's schema refers to ``#/$defs/City``: accepted, and the run's answer is
    decoded into the type."""
    answer = '{"cities": [{"name": "Lyon"}], "capital": {"name": "Paris"}}'
    agent = create_agent(generate=ScriptedModel([answer]), output=Report)
    result = await agent.run("report")
    assert result.output == Report(cities=[City(name="Lyon")], capital=City(name="Paris"))
