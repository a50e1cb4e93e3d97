#!/usr/bin/env node
// A desktop client that stays: the official TypeScript SDK v2 client
// (`@modelcontextprotocol/client`) launching `mcp-aggregator stdio` exactly
// as a client config would, then taking commands on stdin, one per line,
// and printing one JSON line per command (see tests/python/held_client.py):
//   tools | call NAME JSON (a JSON-RPC error: {error}) | quit
//
//   held_client_v2.mjs <aggregator binary> [aggregator args...]

import readline from "node:readline";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [binary, ...args] = process.argv.slice(2);
const client = new Client(
  { name: "held-ts-v2", version: "1.0.0" },
  { capabilities: {}, versionNegotiation: { mode: "legacy" } },
);
await client.connect(new StdioClientTransport({ command: binary, args, stderr: "ignore" }));
const say = (value) => process.stdout.write(JSON.stringify(value) + "\n");
say({ ready: true });
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const [word, name, ...rest] = line.trim().split(" ");
  if (word === "" || word === "quit") break;
  if (word === "tools") {
    const { tools } = await client.listTools();
    say({ tools: tools.map((tool) => tool.name) });
  } else if (word === "call") {
    try {
      const result = await client.callTool({ name, arguments: rest.length ? JSON.parse(rest.join(" ")) : {} });
      say({ text: result.content?.[0]?.text ?? null, is_error: result.isError ?? false });
    } catch (error) {
      // A JSON-RPC error: the session goes on.
      say({ error: String(error?.message ?? error) });
    }
  }
}
await client.close();
say({ closed: true });
process.exit(0);
