"""A server of the Python MCP SDK 2.x (`MCPServer`) that speaks only the
2026-07-28 revision (no `initialize`): a downstream server for the interop
tests. stdio, or Streamable HTTP on 127.0.0.1 with `--http PORT`."""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("python-modern")


@server.tool()
def greet(name: str) -> str:
    """Greets someone by name."""
    return f"hello {name}, from a 2026-07-28 server"


if "--http" in sys.argv:
    port = int(sys.argv[sys.argv.index("--http") + 1])
    server.run(transport="streamable-http", host="127.0.0.1", port=port)
else:
    server.run()
