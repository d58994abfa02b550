"""Model Context Protocol: any MCP server's tools in a run (``MCPServer``).

Built on the official ``mcp`` SDK (``pip install 'operative[mcp]'``), imported only when
this package is. See the guide, docs/mcp.md.
"""

from ._client import MCPServer as MCPServer
from ._errors import MCPConnectionError as MCPConnectionError
from ._errors import MCPNotConnectedError as MCPNotConnectedError
from ._errors import MCPProtocolError as MCPProtocolError
from ._errors import MCPServerError as MCPServerError
from ._errors import MCPToolError as MCPToolError

__all__ = [
    "MCPConnectionError",
    "MCPNotConnectedError",
    "MCPProtocolError",
    "MCPServer",
    "MCPServerError",
    "MCPToolError",
]
