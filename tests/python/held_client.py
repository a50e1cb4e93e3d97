"""A desktop client that stays: the official Python MCP SDK 2.x launching
`mcp-aggregator stdio` exactly as a client config would, then taking
commands on stdin, one per line, and printing one JSON line per command:

    tools            the tool names listed now
    call NAME JSON   a tool call's first text and is_error (or its JSON-RPC
                     error: {"error": message})
    quit             close the session and exit

    held_client.py <aggregator binary> [aggregator args...]

The environment the SDK gives the aggregator is its default one (HOME, PATH,
...), as for any client config.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


async def main():
    server = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with Client(server, mode="legacy") as client:
        print(json.dumps({"ready": True}), flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            words = line.strip().split(" ", 2)
            if words[0] in ("", "quit"):
                break
            if words[0] == "tools":
                tools = await client.list_tools()
                print(json.dumps({"tools": [t.name for t in tools.tools]}), flush=True)
            elif words[0] == "call":
                arguments = json.loads(words[2]) if len(words) > 2 else {}
                try:
                    result = await client.call_tool(words[1], arguments)
                except Exception as err:  # a JSON-RPC error: the session goes on
                    print(json.dumps({"error": str(err)}), flush=True)
                    continue
                text = result.content[0].text if result.content else None
                print(json.dumps({"text": text, "is_error": result.is_error}), flush=True)
    print(json.dumps({"closed": True}), flush=True)


asyncio.run(main())
