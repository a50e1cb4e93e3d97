#!/usr/bin/env node
// A server that speaks both protocol eras over Streamable HTTP the way the
// conformance repository's reference server does: 2026-07-28 requests
// stateless, 2025 clients in sessions of their own (an `Mcp-Session-Id`).
// Built on the TypeScript SDK v2. Its tool and its prompt, both `era`,
// answer which era served the request: `modern` or `legacy`; its tool
// `sleep` does the same after `ms` milliseconds, having appended `started`
// to the `--started-file` given.
//
//   node dual_era_server.mjs --http 3001 [--started-file FILE] [--forget-sessions]
//
// `--forget-sessions`: each 2025 session is forgotten after its first
// call (as replicas that share no sessions, or a restart, do).

import { randomUUID } from "node:crypto";
import {
  createMcpHandler,
  isLegacyRequest,
  Server,
  WebStandardStreamableHTTPServerTransport,
} from "@modelcontextprotocol/server";
import { serveFetch } from "./fetch_http.mjs";

import { appendFileSync } from "node:fs";

const args = process.argv.slice(2);
const port = Number(args[args.indexOf("--http") + 1]);
const startedFile = args.includes("--started-file") ? args[args.indexOf("--started-file") + 1] : null;
const forgetSessions = args.includes("--forget-sessions");

function build(era) {
  const server = new Server({ name: "dual-era", version: "1.0.0" }, { capabilities: { tools: {}, prompts: {} } });
  server.setRequestHandler("tools/list", () => ({
    tools: [
      {
        name: "era",
        description: "Says which protocol era served this call",
        inputSchema: { type: "object", properties: {} },
      },
      {
        name: "sleep",
        description: "Says which protocol era served this call, after ms milliseconds",
        inputSchema: { type: "object", properties: { ms: { type: "number" } } },
      },
    ],
  }));
  server.setRequestHandler("tools/call", async (request) => {
    if (request.params.name === "sleep") {
      if (startedFile) appendFileSync(startedFile, "started\n");
      await new Promise((done) => setTimeout(done, request.params.arguments?.ms ?? 0));
    }
    return { content: [{ type: "text", text: era }] };
  });
  server.setRequestHandler("prompts/list", () => ({
    prompts: [{ name: "era", description: "Says which protocol era served this request" }],
  }));
  server.setRequestHandler("prompts/get", () => ({
    messages: [{ role: "user", content: { type: "text", text: era } }],
  }));
  return server;
}

const modern = createMcpHandler(() => build("modern"), { legacy: "reject" });
const sessions = new Map();

async function legacy(request) {
  const id = request.headers.get("mcp-session-id");
  if (id) {
    const transport = sessions.get(id);
    if (!transport) return new Response("unknown session", { status: 404 });
    const calling = forgetSessions && request.method === "POST" && (await request.clone().text()).includes('"tools/call"');
    const response = await transport.handleRequest(request);
    if (calling) sessions.delete(id);
    return response;
  }
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (sid) => sessions.set(sid, transport),
    onsessionclosed: (sid) => sessions.delete(sid),
  });
  await build("legacy").connect(transport);
  return transport.handleRequest(request);
}

serveFetch(port, async (request) =>
  (await isLegacyRequest(request)) ? legacy(request) : modern.fetch(request),
);
