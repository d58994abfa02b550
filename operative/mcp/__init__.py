"""Model Context Protocol: any MCP server's tools in a run (``MCPServer``), and operative
tools served to MCP clients (``serve_stdio``, ``mcp_app``, ``agent_tool``).

Built on the official ``mcp`` SDK (``pip install 'operative[mcp]'``), imported only when
this package is. See the guide, docs/mcp.md.
"""

from ._agent_tool import agent_tool as agent_tool
from ._asgi import mcp_app as mcp_app
from ._client import MCPServer as MCPServer
from ._errors import MCPConnectionError as MCPConnectionError
from ._errors import MCPNotConnectedError as MCPNotConnectedError
from ._errors import MCPProtocolError as MCPProtocolError
from ._errors import MCPServerError as MCPServerError
from ._errors import MCPToolError as MCPToolError
from ._server import ServedTools as ServedTools
from ._server import serve_stdio as serve_stdio

__all__ = [
    "MCPConnectionError",
    "MCPNotConnectedError",
    "MCPProtocolError",
    "MCPServer",
    "MCPServerError",
    "MCPToolError",
    "ServedTools",
    "agent_tool",
    "mcp_app",
    "serve_stdio",
]
