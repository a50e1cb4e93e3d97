"""Interop with the official Python MCP SDK 2.x (`mcp==2.3.0`, a client of both
protocol eras) as a desktop client would use it: launch `mcp-aggregator stdio`
(or connect to `/mcp`), list once, call a tool, and answer a server's roots
request through the aggregator - in each connect mode the SDK offers
(`auto`: discover then fall back; `legacy`: initialize; `2026-07-28`: modern
only). Prints one JSON line per mode.

    interop_v2.py stdio <aggregator binary> <config> <data dir base>
    interop_v2.py http <mcp url>
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters, types

ROOT = "file:///from-the-python-v2-client"


async def list_roots(_context):
    return types.ListRootsResult(roots=[types.Root(uri=ROOT, name="mine")])


async def run(mode, server):
    async with Client(server, mode=mode, list_roots_callback=list_roots) as client:
        tools = await client.list_tools()
        names = [tool.name for tool in tools.tools]
        echoed = await client.call_tool("fx__echo", {"from": "python-v2", "n": [1, 2.5, None]})
        roots = await client.call_tool("fx__roots", {})
        return {
            "mode": mode,
            "tools": names,
            "echo": echoed.content[0].text,
            "echo_error": echoed.is_error,
            "roots": roots.content[0].text,
            "roots_error": roots.is_error,
        }


async def main():
    target = sys.argv[1]
    for mode in ["auto", "legacy", "2026-07-28"]:
        if target == "stdio":
            binary, config, data = sys.argv[2], sys.argv[3], sys.argv[4]
            server = StdioServerParameters(
                command=binary, args=["stdio", "--config", config, "--data-dir", f"{data}-{mode}", "--idle-exit", "0s"]
            )
        else:
            server = sys.argv[2]
        print(json.dumps(await run(mode, server)), flush=True)


asyncio.run(main())
