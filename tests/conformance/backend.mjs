#!/usr/bin/env node
// The conformance backend: an MCP server (TypeScript SDK 1.x) offering every
// tool, resource, template and prompt the official conformance runner's
// server scenarios call, so the runner can be pointed at the aggregator with
// this server behind it. Speaks stdio, or Streamable HTTP with `--http PORT`
// (sessions, resumable streams).
//
//   node backend.mjs                 stdio
//   node backend.mjs --http 3001     Streamable HTTP on 127.0.0.1:3001/mcp

import { randomUUID } from "node:crypto";
import http from "node:http";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  ElicitResultSchema,
  CreateMessageResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ErrorCode,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import {
  getPrompt,
  PNG,
  PROMPTS,
  QUESTION_TOOLS,
  readResource,
  RESOURCES,
  SEP1034_MESSAGE,
  SEP1034_SCHEMA,
  SEP1330_MESSAGE,
  SEP1330_SCHEMA,
  staticToolResult,
  TEMPLATES,
  text,
  WAV,
} from "./scenario_data.mjs";


const noArguments = { type: "object", properties: {} };

const TOOLS = [
  { name: "test_simple_text", description: "Answers with one text block", inputSchema: noArguments },
  { name: "test_image_content", description: "Answers with a PNG image", inputSchema: noArguments },
  { name: "test_audio_content", description: "Answers with a WAV clip", inputSchema: noArguments },
  { name: "test_embedded_resource", description: "Answers with an embedded text resource", inputSchema: noArguments },
  {
    name: "test_multiple_content_types",
    description: "Answers with text, an image and an embedded resource",
    inputSchema: noArguments,
  },
  { name: "test_tool_with_logging", description: "Sends three log messages while it runs", inputSchema: noArguments },
  { name: "test_tool_with_progress", description: "Reports progress 0, 50 and 100 of 100", inputSchema: noArguments },
  { name: "test_error_handling", description: "Always fails (isError)", inputSchema: noArguments },
  ...QUESTION_TOOLS,
  {
    name: "json_schema_2020_12_tool",
    description: "Input schema in JSON Schema 2020-12 with $defs",
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: {
        address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } },
      },
      properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
      additionalProperties: false,
    },
  },
  { name: "test_reconnection", description: "Closes the answer's stream before answering (HTTP)", inputSchema: noArguments },
  {
    name: "test_custom_headers",
    description: "Arguments mirrored into HTTP headers (x-mcp-header)",
    inputSchema: {
      type: "object",
      properties: {
        region: { type: "string", "x-mcp-header": "Region" },
        query: { type: "string" },
      },
      required: ["region"],
    },
  },
];


const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/// One MCP server (one per HTTP session; one for stdio).
function newServer(transports) {
  const server = new Server(
    { name: "mcp-aggregator-conformance-backend", version: "1.0.0" },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
    },
  );
  const log = (level, data) =>
    server.notification({ method: "notifications/message", params: { level, logger: "conformance-backend", data } }).catch(() => {});

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const args = request.params.arguments ?? {};
    const notify = (method, params) => extra.sendNotification({ method, params });
    const fixed = staticToolResult(request.params.name);
    if (fixed) return fixed;
    switch (request.params.name) {
      case "test_tool_with_logging":
        for (const said of ["Tool execution started", "Tool processing data", "Tool execution completed"]) {
          await notify("notifications/message", { level: "info", data: said });
          await pause(20);
        }
        return { content: [text("Tool with logging executed successfully")] };
      case "test_tool_with_progress": {
        const progressToken = request.params._meta?.progressToken ?? 0;
        for (const progress of [0, 50, 100]) {
          await notify("notifications/progress", {
            progressToken,
            progress,
            total: 100,
            message: `Completed step ${progress} of 100`,
          });
          await pause(20);
        }
        return { content: [text(String(progressToken))] };
      }
      case "test_error_handling":
        return { content: [text("This tool intentionally returns an error for testing")], isError: true };
      case "test_sampling": {
        const result = await extra.sendRequest(
          {
            method: "sampling/createMessage",
            params: { messages: [{ role: "user", content: text(args.prompt) }], maxTokens: 100 },
          },
          CreateMessageResultSchema,
        );
        return { content: [text(`LLM response: ${result.content?.text ?? "No response"}`)] };
      }
      case "test_elicitation":
        return elicit(extra, args.message, {
          type: "object",
          properties: { response: { type: "string", description: "User's response" } },
          required: ["response"],
        }, "User response");
      case "test_elicitation_sep1034_defaults":
        return elicit(extra, SEP1034_MESSAGE, SEP1034_SCHEMA);
      case "test_elicitation_sep1330_enums":
        return elicit(extra, SEP1330_MESSAGE, SEP1330_SCHEMA);
      case "json_schema_2020_12_tool":
        return { content: [text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`)] };
      case "test_custom_headers":
        return { content: [text(`region=${args.region}`)] };
      case "test_reconnection": {
        const transport = extra.sessionId ? transports?.get(extra.sessionId) : undefined;
        if (transport && extra.requestId !== undefined) {
          transport.closeSSEStream(extra.requestId);
        }
        await pause(100);
        return { content: [text("Reconnection test completed successfully.")] };
      }
      default:
        throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: TEMPLATES }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const contents = readResource(request.params.uri);
    if (!contents) {
      throw new McpError(-32002, `Resource not found: ${request.params.uri}`, { uri: request.params.uri });
    }
    return { contents };
  });
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    log("info", `Subscribed to resource: ${request.params.uri}`);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    log("info", `Unsubscribed from resource: ${request.params.uri}`);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const messages = getPrompt(request.params.name, request.params.arguments ?? {});
    if (!messages) {
      throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${request.params.name}`);
    }
    return { messages };
  });

  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    log("info", `Log level set to: ${request.params.level}`);
    return {};
  });
  server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

async function elicit(extra, message, requestedSchema, label = "Elicitation completed") {
  const result = await extra.sendRequest(
    { method: "elicitation/create", params: { mode: "form", message, requestedSchema } },
    ElicitResultSchema,
  );
  return { content: [text(`${label}: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`)] };
}

/// Events kept for resumption (`Last-Event-ID`), per stream.
function eventStore() {
  const events = [];
  return {
    async storeEvent(streamId, message) {
      const eventId = `${streamId}::${String(events.length).padStart(8, "0")}`;
      events.push({ eventId, streamId, message });
      return eventId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const streamId = lastEventId.split("::")[0];
      for (const event of events) {
        if (event.streamId === streamId && event.eventId > lastEventId) {
          await send(event.eventId, event.message);
        }
      }
      return streamId;
    },
  };
}

async function serveHttp(port) {
  const transports = new Map();
  const readBody = (request) =>
    new Promise((resolve, reject) => {
      const chunks = [];
      request.on("data", (chunk) => chunks.push(chunk));
      request.on("end", () => {
        const raw = Buffer.concat(chunks).toString();
        try {
          resolve(raw ? JSON.parse(raw) : undefined);
        } catch (err) {
          reject(err);
        }
      });
      request.on("error", reject);
    });
  const httpServer = http.createServer(async (request, response) => {
    if (!request.url?.startsWith("/mcp")) {
      response.writeHead(404).end();
      return;
    }
    const sessionId = request.headers["mcp-session-id"];
    try {
      const body = request.method === "POST" ? await readBody(request) : undefined;
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport && request.method === "POST" && !sessionId && body?.method === "initialize") {
        const server = newServer(transports);
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          eventStore: eventStore(),
          retryInterval: 1000,
          enableDnsRebindingProtection: true,
          allowedHosts: [`127.0.0.1:${port}`, `localhost:${port}`],
          onsessioninitialized: (id) => transports.set(id, transport),
        });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await server.connect(transport);
      }
      if (!transport) {
        response.writeHead(sessionId ? 404 : 400, { "content-type": "application/json" });
        response.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "no such session" } }));
        return;
      }
      await transport.handleRequest(request, response, body);
    } catch (err) {
      if (!response.headersSent) {
        response.writeHead(400, { "content-type": "application/json" });
        response.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: String(err) } }));
      }
    }
  });
  httpServer.listen(port, "127.0.0.1");
}

const httpAt = process.argv.indexOf("--http");
if (httpAt >= 0) {
  await serveHttp(Number(process.argv[httpAt + 1]));
} else {
  await newServer(null).connect(new StdioServerTransport());
}
