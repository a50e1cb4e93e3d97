#!/usr/bin/env node
// Interop with the official TypeScript SDK v2 client (npm
// `@modelcontextprotocol/client` 2.4.0) in each of its negotiation modes —
// `legacy` (initialize), `auto` (server/discover, then fall back) and pinned
// to 2026-07-28 — as a desktop client would use it: launch
// `mcp-aggregator stdio` (or connect to `/mcp`), list once, call a tool, and
// answer a server's roots request through the aggregator. Prints one JSON
// line per mode.
//
//   interop_client_v2.mjs stdio <aggregator binary> <config> <data dir base>
//   interop_client_v2.mjs http <mcp url>

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const ROOT = "file:///from-the-typescript-v2-client";
const MODES = [
  ["legacy", "legacy"],
  ["auto", "auto"],
  ["2026-07-28", { pin: "2026-07-28" }],
];

async function run(label, mode, transport) {
  const client = new Client(
    { name: "interop-ts-v2", version: "1.0.0" },
    { capabilities: { roots: {} }, versionNegotiation: { mode } },
  );
  client.setRequestHandler("roots/list", () => ({ roots: [{ uri: ROOT, name: "mine" }] }));
  await client.connect(transport);
  try {
    const tools = await client.listTools();
    const echoed = await client.callTool({ name: "fx__echo", arguments: { from: "ts-v2", n: [1, 2.5, null] } });
    const roots = await client.callTool({ name: "fx__roots", arguments: {} });
    return {
      mode: label,
      tools: tools.tools.map((tool) => tool.name),
      echo: echoed.content?.[0]?.text,
      echo_error: echoed.isError ?? false,
      roots: roots.content?.[0]?.text,
      roots_error: roots.isError ?? false,
    };
  } finally {
    await client.close();
  }
}

const [how, ...rest] = process.argv.slice(2);
for (const [label, mode] of MODES) {
  let transport;
  if (how === "stdio") {
    const [binary, config, dataBase] = rest;
    transport = new StdioClientTransport({
      command: binary,
      args: ["stdio", "--config", config, "--data-dir", `${dataBase}-${label}`, "--idle-exit", "0s"],
      stderr: "ignore",
    });
  } else {
    transport = new StreamableHTTPClientTransport(new URL(rest[0]));
  }
  const out = await run(label, mode, transport);
  process.stdout.write(JSON.stringify(out) + "\n");
}
