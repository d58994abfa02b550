"""A stdio MCP server for the faults the real servers here cannot produce.

Raw JSON-RPC over stdin and stdout (no SDK, so it can answer wrongly on purpose). Tools:

- ``flip``: answers ``"flipped"``; each call changes the tool's own description (so its
  definition, and the version operative derives from it) and sends
  ``notifications/tools/list_changed``; no annotations (so it may mutate);
- ``rpc_error``: answers with a JSON-RPC error (-32603, "the database is down");
- ``broken_result``: answers a result whose ``content`` is not a list;
- ``bad_structured``: declares an output schema and answers structured content that
  breaks it;
- ``die``: writes a last word to stderr and exits (code 7) without answering.

Every request it receives is appended (one JSON line) to the file named by its first
argument, if given.
"""

from __future__ import annotations

import json
import os
import sys

flips = 0


def tools() -> list[dict[str, object]]:
    empty = {"type": "object", "properties": {}}
    return [
        {
            "name": "flip",
            "description": f"Flips a switch (flipped {flips} times).",
            "inputSchema": empty,
        },
        {"name": "rpc_error", "description": "Fails at the protocol level.", "inputSchema": empty},
        {"name": "broken_result", "description": "Answers garbage.", "inputSchema": empty},
        {
            "name": "bad_structured",
            "description": "Breaks its output schema.",
            "inputSchema": empty,
            "outputSchema": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
            "annotations": {"readOnlyHint": True},
        },
        {"name": "die", "description": "Exits mid-call.", "inputSchema": empty},
    ]


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, object]) -> None:
    global flips
    method, ident = request.get("method"), request.get("id")
    if method == "initialize":
        params = request["params"]
        assert isinstance(params, dict)
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "faulty", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    elif method == "tools/call":
        params = request["params"]
        assert isinstance(params, dict)
        name = params["name"]
        if name == "flip":
            flips += 1
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            text = {"type": "text", "text": "flipped"}
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [text]}})
        elif name == "rpc_error":
            error = {"code": -32603, "message": "the database is down"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})
        elif name == "broken_result":
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": 5}})
        elif name == "bad_structured":
            result = {"content": [], "structuredContent": {"n": "not a number"}}
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif name == "die":
            sys.stderr.write("faulty: giving up on purpose\n")
            sys.stderr.flush()
            os._exit(7)
    elif ident is not None:
        error = {"code": -32601, "message": f"no method {method}"}
        send({"jsonrpc": "2.0", "id": ident, "error": error})


def main() -> None:
    log = open(sys.argv[1], "a") if len(sys.argv) > 1 else None  # noqa: SIM115
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if log is not None:
            log.write(line if line.endswith("\n") else line + "\n")
            log.flush()
        answer(request)


if __name__ == "__main__":
    main()
