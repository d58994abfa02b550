"""A stdio MCP server whose schemas point elsewhere, for ``test_schema_refs.py``.

Raw JSON-RPC over stdin and stdout (no SDK, so it can send any schema). Its first
argument is a URL; its second, a ``file:`` URL. Tools:

- ``remote_input``: an ``inputSchema`` with a ``$ref`` to the URL;
- ``file_input``: an ``inputSchema`` with a ``$ref`` to the file;
- ``remote_output``: an ``outputSchema`` with a ``$ref`` to the URL;
- ``local``: input and output schemas whose ``$ref``\\ s point into their own ``$defs``;
  answers ``{"n": <its argument n>}`` as structured content;
- ``ask``: sends ``elicitation/create`` with a form schema whose ``$ref`` points to the
  URL, and answers with the client's reply to it (JSON, as text).
"""

from __future__ import annotations

import json
import sys

URL, FILE_URL = sys.argv[1], sys.argv[2]
EMPTY = {"type": "object", "properties": {}}
LOCAL_DEFS = {"count": {"type": "integer", "minimum": 0}}


def tools() -> list[dict[str, object]]:
    return [
        {
            "name": "remote_input",
            "inputSchema": {"type": "object", "properties": {"q": {"$ref": URL}}},
        },
        {
            "name": "file_input",
            "inputSchema": {"type": "object", "properties": {"q": {"$ref": FILE_URL}}},
        },
        {
            "name": "remote_output",
            "inputSchema": EMPTY,
            "outputSchema": {"type": "object", "properties": {"n": {"$ref": URL}}},
        },
        {
            "name": "local",
            "inputSchema": {
                "type": "object",
                "properties": {"n": {"$ref": "#/$defs/count"}},
                "required": ["n"],
                "$defs": LOCAL_DEFS,
            },
            "outputSchema": {
                "type": "object",
                "properties": {"n": {"$ref": "#/$defs/count"}},
                "required": ["n"],
                "$defs": LOCAL_DEFS,
            },
            "annotations": {"readOnlyHint": True},
        },
        {"name": "ask", "inputSchema": EMPTY, "annotations": {"readOnlyHint": True}},
    ]


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def receive() -> dict[str, object] | None:
    while True:
        line = sys.stdin.readline()
        if not line:
            return None
        if line.strip():
            message = json.loads(line)
            assert isinstance(message, dict)
            return message


def text(value: object) -> dict[str, object]:
    return {"content": [{"type": "text", "text": json.dumps(value)}]}


def call(ident: object, params: dict[str, object]) -> None:
    name = params["name"]
    arguments = params.get("arguments") or {}
    assert isinstance(arguments, dict)
    if name == "local":
        result = {**text({"n": arguments["n"]}), "structuredContent": {"n": arguments["n"]}}
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif name == "ask":
        form = {"type": "object", "properties": {"city": {"$ref": URL}}}
        send(
            {
                "jsonrpc": "2.0",
                "id": "elicit-1",
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "Which city?", "requestedSchema": form},
            }
        )
        while (reply := receive()) is not None and reply.get("id") != "elicit-1":
            pass
        send({"jsonrpc": "2.0", "id": ident, "result": text(reply)})
    else:
        error = {"code": -32602, "message": f"no tool {name}"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})


def main() -> None:
    while (request := receive()) is not None:
        method, ident = request.get("method"), request.get("id")
        params = request.get("params") or {}
        assert isinstance(params, dict)
        if method == "initialize":
            capabilities = {"tools": {"listChanged": False}}
            info = {"name": "refs", "version": "1"}
            result = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": capabilities,
                "serverInfo": info,
            }
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
        elif method == "tools/call":
            call(ident, params)
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": ident, "result": {}})
        elif ident is not None and method is not None:
            error = {"code": -32601, "message": f"no method {method}"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})


if __name__ == "__main__":
    main()
