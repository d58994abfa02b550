"""What can go wrong with an MCP server, as ``OperativeError``\\ s.

A tool call that fails for one of these reasons settles as an ``error`` result whose
text names the class, so the model (and whoever reads the transcript) sees what broke.
"""

from __future__ import annotations

from .._core._errors import OperativeError

__all__ = [
    "MCPConnectionError",
    "MCPNotConnectedError",
    "MCPProtocolError",
    "MCPServerError",
    "MCPToolError",
]


class MCPServerError(OperativeError):
    """An MCP server could not do what was asked (the base of the errors below)."""


class MCPNotConnectedError(MCPServerError, RuntimeError):
    """The server was used outside its ``async with server:`` block.

    Open it first (``async with MCPServer.stdio(...) as server:``) and start the runs that
    use it inside the block; its tools stop working when the block ends.
    """


class MCPConnectionError(MCPServerError, ConnectionError):
    """The server could not be started or reached, or the connection to it was lost (the
    process exited, the HTTP endpoint went away)."""


class MCPProtocolError(MCPServerError):
    """The server answered with a JSON-RPC error, or with a result that breaks the protocol
    (a result that does not parse, structured content that misses its output schema).

    ``code`` is the JSON-RPC error code when the server sent one.
    """

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class MCPToolError(MCPServerError):
    """The tool ran and reported a failure (``isError``); the message is its own text."""
