"""Drives mcp-aggregator with the official Python MCP SDK (an independent
client): lists the tools and calls one, over stdio or Streamable HTTP.

usage: interop.py stdio BIN CONFIG DATA_DIR TOOL
       interop.py http URL TOOL
Prints one JSON line: {"tools": [...names], "result": <call result>}.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


async def exercise(session: ClientSession, tool: str) -> dict:
    await session.initialize()
    deadline = time.monotonic() + 30
    while True:
        names = [t.name for t in (await session.list_tools()).tools]
        if tool in names or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    result = await session.call_tool(tool, {"from": "python", "n": [1, 2.5, None]})
    return {"tools": names, "result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}


async def main() -> None:
    mode = sys.argv[1]
    if mode == "stdio":
        binary, config, data_dir, tool = sys.argv[2:6]
        params = StdioServerParameters(command=binary, args=["stdio", "--config", config, "--data-dir", data_dir, "--idle-exit", "0s"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                out = await exercise(session, tool)
    else:
        url, tool = sys.argv[2:4]
        async with streamablehttp_client(url) as (read, write, _):
            async with ClientSession(read, write) as session:
                out = await exercise(session, tool)
    print(json.dumps(out))


asyncio.run(main())
