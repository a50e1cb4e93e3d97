#!/usr/bin/env node
// The 2026-07-28 conformance backend: a dual-era MCP server built on the
// TypeScript SDK v2 (`@modelcontextprotocol/server`), offering what the
// conformance runner's 2026-07-28 server scenarios call — the multi-round-trip
// (input_required) tools, the capability and header probes, list-change
// triggers for `subscriptions/listen` — beside the tools, resources and
// prompts every revision's scenarios use. Its `requestState` is sealed with
// an HMAC, so a tampered state is refused as the scenarios expect.
//
//   node backend2026.mjs                  stdio (modern or 2025, as the client opens)
//   node backend2026.mjs --http 3001      Streamable HTTP on 127.0.0.1:3001/mcp
//   ... --modern-only                     refuse the 2025 revisions
//   ... --ttl-ms N --no-list-changed      lists fresh for N ms, and no
//                                         list_changed (clients re-list)

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { serveFetch } from "./fetch_http.mjs";
import {
  createMcpHandler,
  inputRequired,
  InMemoryServerEventBus,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  Server,
} from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import {
  getPrompt as scenarioPrompt,
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
} from "./scenario_data.mjs";

const noArguments = { type: "object", properties: {} };
const INVALID_PARAMS = -32602;

const args = process.argv.slice(2);
const httpPort = args.includes("--http") ? Number(args[args.indexOf("--http") + 1]) : null;
const modernOnly = args.includes("--modern-only");
const listTtl = args.includes("--ttl-ms") ? Number(args[args.indexOf("--ttl-ms") + 1]) : null;
const announcesChanges = !args.includes("--no-list-changed");

// What the list-change triggers add; shared by every per-request instance.
const added = { tools: false, prompts: false };
const bus = new InMemoryServerEventBus();
const stdioInstances = new Set();

const INPUT_TOOLS = [
  "test_input_required_result_elicitation",
  "test_input_required_result_sampling",
  "test_input_required_result_list_roots",
  "test_input_required_result_request_state",
  "test_input_required_result_multiple_inputs",
  "test_input_required_result_multi_round",
  "test_input_required_result_tampered_state",
  "test_input_required_result_capabilities",
];

function tools() {
  const list = [
    ["test_simple_text", "Answers with one text block"],
    ["test_image_content", "Answers with a PNG image"],
    ["test_audio_content", "Answers with a WAV clip"],
    ["test_embedded_resource", "Answers with an embedded text resource"],
    ["test_multiple_content_types", "Answers with text, an image and an embedded resource"],
    ["test_tool_with_logging", "Sends three log messages while it runs"],
    ["test_logging_tool", "Sends a log message while it runs"],
    ["test_tool_with_progress", "Reports progress 0, 50 and 100 of 100"],
    ["test_error_handling", "Always fails (isError)"],
    ["test_missing_capability", "Needs the client's sampling capability"],
    ["test_streaming_elicitation", "Asks the user something, in band"],
    ["test_trigger_tool_change", "Adds a tool (tools list changes)"],
    ["test_trigger_prompt_change", "Adds a prompt (prompts list changes)"],
    ...INPUT_TOOLS.map((name) => [name, "Multi-round-trip: asks the client for input"]),
  ].map(([name, description]) => ({ name, description, inputSchema: noArguments }));
  // The 2025 scenarios' questions, asked as input requests: the SDK asks a
  // 2025 client with real requests, a 2026-07-28 client in band.
  list.push(...QUESTION_TOOLS);
  list.push({
    name: "test_x_mcp_header",
    description: "Arguments mirrored into HTTP headers (x-mcp-header)",
    inputSchema: {
      type: "object",
      properties: {
        region: { type: "string", "x-mcp-header": "Region" },
        level: { type: "integer" },
      },
    },
  });
  list.push({
    name: "json_schema_2020_12_tool",
    description: "Input schema in JSON Schema 2020-12 with $defs, $ref, $anchor and conditionals",
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: {
        address: {
          $anchor: "addressDef",
          type: "object",
          properties: { street: { type: "string" }, city: { type: "string" } },
        },
      },
      properties: {
        name: { type: "string" },
        address: { $ref: "#/$defs/address" },
        contactMethod: { type: "string", enum: ["phone", "email"] },
        phone: { type: "string" },
        email: { type: "string" },
      },
      allOf: [{ anyOf: [{ required: ["phone"] }, { required: ["email"] }] }],
      if: { properties: { contactMethod: { const: "phone" } }, required: ["contactMethod"] },
      then: { required: ["phone"] },
      else: { required: ["email"] },
      additionalProperties: false,
    },
  });
  if (added.tools) {
    list.push({ name: "test_added_tool", description: "Added by test_trigger_tool_change", inputSchema: noArguments });
  }
  return list;
}

function prompts() {
  const list = [...PROMPTS, { name: "test_input_required_result_prompt", description: "Multi-round-trip: asks for input first" }];
  if (added.prompts) list.push({ name: "test_added_prompt", description: "Added by test_trigger_prompt_change" });
  return list;
}

// requestState: `body.mac`, body = base64url(JSON {tool, round, data, exp}).
const STATE_KEY = randomBytes(32);
function sealState(payload) {
  const body = Buffer.from(JSON.stringify({ ...payload, exp: Date.now() + 600_000 })).toString("base64url");
  const mac = createHmac("sha256", STATE_KEY).update(body).digest("base64url");
  return `${body}.${mac}`;
}
function openState(state, tool) {
  const refuse = () => {
    throw new ProtocolError(INVALID_PARAMS, "requestState failed integrity validation");
  };
  if (typeof state !== "string") refuse();
  const [body, mac] = state.split(".");
  if (!body || !mac) refuse();
  const expected = createHmac("sha256", STATE_KEY).update(body).digest();
  const given = Buffer.from(mac, "base64url");
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) refuse();
  const payload = JSON.parse(Buffer.from(body, "base64url").toString());
  if (payload.tool !== tool || payload.exp < Date.now()) refuse();
  return payload;
}

const elicitText = (message, property) =>
  inputRequired.elicit({
    message,
    requestedSchema: { type: "object", properties: { [property]: { type: "string" } }, required: [property] },
  });
const elicitBool = (message, property) =>
  inputRequired.elicit({
    message,
    requestedSchema: { type: "object", properties: { [property]: { type: "boolean" } }, required: [property] },
  });
const sample = (text, maxTokens) =>
  inputRequired.createMessage({ messages: [{ role: "user", content: { type: "text", text } }], maxTokens });

function accepted(responses, key, property) {
  const answer = responses?.[key];
  if (answer?.action !== "accept") return undefined;
  return answer.content?.[property];
}
const sampled = (responses, key) => {
  const content = responses?.[key]?.content;
  return content?.type === "text" ? content.text : undefined;
};
const rootsOf = (responses, key) => (Array.isArray(responses?.[key]?.roots) ? responses[key].roots : undefined);
const text = (t) => ({ content: [{ type: "text", text: t }] });

// A form the user fills in; its answer, once given, ends the call.
function askForm(responses, message, requestedSchema, label = "Elicitation completed") {
  const answer = responses?.answer;
  if (answer?.action) {
    return text(`${label}: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
  }
  return inputRequired({
    inputRequests: { answer: { method: "elicitation/create", params: { mode: "form", message, requestedSchema } } },
  });
}

function clientCapabilities(server, request, ctx) {
  const envelope = ctx.mcpReq.envelope ?? {};
  return (
    envelope.clientCapabilities ??
    envelope["io.modelcontextprotocol/clientCapabilities"] ??
    server.getClientCapabilities() ??
    {}
  );
}

async function callTool(server, request, ctx) {
  const name = request.params.name;
  const responses = ctx.mcpReq.inputResponses;
  const state = request.params.requestState ?? ctx.mcpReq.requestState();
  const fixed = staticToolResult(name);
  if (fixed) return fixed;
  switch (name) {
    case "test_tool_with_logging":
    case "test_logging_tool":
      for (const step of ["Tool execution started", "Tool processing data", "Tool execution completed"]) {
        await ctx.mcpReq.log("info", step);
      }
      return text("Tool with logging executed successfully");
    case "test_tool_with_progress": {
      const token = request.params._meta?.progressToken;
      if (token !== undefined) {
        for (const progress of [0, 50, 100]) {
          await ctx.mcpReq.notify({ method: "notifications/progress", params: { progressToken: token, progress, total: 100 } });
        }
      }
      return text(`Progress reported for ${token}`);
    }
    case "test_error_handling":
      return { isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] };
    case "test_missing_capability":
      if (!clientCapabilities(server, request, ctx).sampling) {
        throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { sampling: {} } });
      }
      if (sampled(responses, "capability_sample") !== undefined) return text("Success");
      return inputRequired({ inputRequests: { capability_sample: sample("Need sampling to continue", 1) } });
    case "test_streaming_elicitation":
    case "test_input_required_result_elicitation": {
      const user = accepted(responses, "user_name", "name");
      if (user !== undefined) return text(`Hello, ${user}!`);
      return inputRequired({ inputRequests: { user_name: elicitText("What is your name?", "name") } });
    }
    case "test_input_required_result_sampling": {
      const answer = sampled(responses, "capital_question");
      if (answer !== undefined) return text(`Sampling response: ${answer}`);
      return inputRequired({ inputRequests: { capital_question: sample("What is the capital of France?", 100) } });
    }
    case "test_input_required_result_list_roots": {
      const roots = rootsOf(responses, "client_roots");
      if (roots) return text(`Client exposed ${roots.length} root(s): ${roots.map((r) => r.uri).join(", ")}`);
      return inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
    }
    case "test_input_required_result_request_state": {
      if (accepted(responses, "confirm", "ok") !== undefined) {
        openState(state, name);
        return text("state-ok: requestState verified and confirmation received");
      }
      return inputRequired({
        inputRequests: { confirm: elicitBool("Please confirm", "ok") },
        requestState: sealState({ tool: name }),
      });
    }
    case "test_input_required_result_multiple_inputs": {
      if (state) openState(state, name);
      const user = accepted(responses, "user_name", "name");
      const greeting = sampled(responses, "greeting");
      const roots = rootsOf(responses, "client_roots");
      if (user !== undefined && greeting !== undefined && roots) {
        return text(`${greeting} ${user}, ${roots.length} root(s) visible`);
      }
      return inputRequired({
        inputRequests: {
          user_name: elicitText("What is your name?", "name"),
          greeting: sample("Generate a greeting", 50),
          client_roots: inputRequired.listRoots(),
        },
        requestState: sealState({ tool: name }),
      });
    }
    case "test_input_required_result_multi_round": {
      const step1 = () =>
        inputRequired({
          inputRequests: { step1: elicitText("Step 1: What is your name?", "name") },
          requestState: sealState({ tool: name, round: 1 }),
        });
      if (!state) return step1();
      const payload = openState(state, name);
      if (payload.round === 1) {
        const user = accepted(responses, "step1", "name");
        if (user === undefined) return step1();
        return inputRequired({
          inputRequests: { step2: elicitText("Step 2: What is your favorite color?", "color") },
          requestState: sealState({ tool: name, round: 2, user }),
        });
      }
      const color = accepted(responses, "step2", "color");
      if (color === undefined) {
        return inputRequired({
          inputRequests: { step2: elicitText("Step 2: What is your favorite color?", "color") },
          requestState: state,
        });
      }
      return text(`Multi-round complete: ${payload.user} likes ${color}`);
    }
    case "test_input_required_result_tampered_state": {
      if (state) {
        openState(state, name);
        if (accepted(responses, "confirm", "ok") !== undefined) return text("integrity-ok: requestState verified");
      }
      return inputRequired({
        inputRequests: { confirm: elicitBool("Please confirm", "ok") },
        requestState: sealState({ tool: name }),
      });
    }
    case "test_input_required_result_capabilities": {
      if (responses) return text("Capability-aware input requests fulfilled");
      const caps = clientCapabilities(server, request, ctx);
      const inputRequests = {};
      if (caps.sampling) inputRequests.greeting = sample("Generate a short greeting", 50);
      if (caps.elicitation) inputRequests.user_name = elicitText("What is your name?", "name");
      if (caps.roots) inputRequests.client_roots = inputRequired.listRoots();
      if (Object.keys(inputRequests).length === 0) {
        return text("No declared client capability supports an in-band input request");
      }
      return inputRequired({ inputRequests });
    }
    case "test_sampling": {
      const answer = sampled(responses, "answer");
      if (answer !== undefined) return text(`LLM response: ${answer}`);
      return inputRequired({
        inputRequests: { answer: sample(request.params.arguments?.prompt ?? "", 100) },
      });
    }
    case "test_elicitation":
      return askForm(responses, request.params.arguments?.message ?? "", {
        type: "object",
        properties: { response: { type: "string", description: "User's response" } },
        required: ["response"],
      }, "User response");
    case "test_elicitation_sep1034_defaults":
      return askForm(responses, SEP1034_MESSAGE, SEP1034_SCHEMA);
    case "test_elicitation_sep1330_enums":
      return askForm(responses, SEP1330_MESSAGE, SEP1330_SCHEMA);
    case "test_x_mcp_header":
      return text(`region=${request.params.arguments?.region ?? "<none>"}`);
    case "json_schema_2020_12_tool":
      return text("json_schema_2020_12_tool");
    case "test_trigger_tool_change":
      added.tools = true;
      await listChanged("tools");
      return text("test_added_tool");
    case "test_trigger_prompt_change":
      added.prompts = true;
      await listChanged("prompts");
      return text("test_added_prompt");
    case "test_added_tool":
      if (added.tools) return text("test_added_tool");
      break;
  }
  throw new ProtocolError(INVALID_PARAMS, `Unknown tool: ${name}`);
}

async function listChanged(kind) {
  if (!announcesChanges) return;
  if (kind === "tools") bus.publish({ kind: "tools_list_changed" });
  else bus.publish({ kind: "prompts_list_changed" });
  for (const server of stdioInstances) {
    await (kind === "tools" ? server.sendToolListChanged() : server.sendPromptListChanged()).catch(() => {});
  }
}

function readResult(uri) {
  const contents = readResource(uri);
  if (!contents) throw new ProtocolError(INVALID_PARAMS, `Resource not found: ${uri}`, { uri });
  return { contents };
}

function getPrompt(request, ctx) {
  const { name, arguments: a = {} } = request.params;
  const user = (content) => ({ role: "user", content });
  const messages = scenarioPrompt(name, a);
  if (messages) return { messages };
  switch (name) {
    case "test_input_required_result_prompt": {
      const answer = ctx.mcpReq.inputResponses?.user_name;
      if (answer?.action !== "accept") {
        return inputRequired({ inputRequests: { user_name: elicitText("What is your name?", "name") } });
      }
      const given = Object.values(answer.content ?? {}).join(", ");
      return { messages: [user({ type: "text", text: `Prompt for ${given}` })] };
    }
    case "test_added_prompt":
      if (added.prompts) return { messages: [user({ type: "text", text: "test_added_prompt" })] };
  }
  throw new ProtocolError(INVALID_PARAMS, `Unknown prompt: ${name}`);
}

function build() {
  const server = new Server(
    { name: "mcp-aggregator-conformance-backend-2026", version: "1.0.0" },
    {
      capabilities: {
        tools: { listChanged: announcesChanges },
        resources: { subscribe: true, listChanged: announcesChanges },
        prompts: { listChanged: announcesChanges },
        logging: {},
        completions: {},
      },
      ...(listTtl === null
        ? {}
        : {
            cacheHints: Object.fromEntries(
              ["tools/list", "prompts/list", "resources/list", "resources/templates/list"].map((m) => [m, { ttlMs: listTtl }]),
            ),
          }),
    },
  );
  server.setRequestHandler("tools/list", () => ({ tools: tools() }));
  server.setRequestHandler("tools/call", (request, ctx) => callTool(server, request, ctx));
  server.setRequestHandler("resources/list", () => ({ resources: RESOURCES }));
  server.setRequestHandler("resources/templates/list", () => ({ resourceTemplates: TEMPLATES }));
  server.setRequestHandler("resources/read", (request) => readResult(request.params.uri));
  server.setRequestHandler("prompts/list", () => ({ prompts: prompts() }));
  server.setRequestHandler("prompts/get", (request, ctx) => getPrompt(request, ctx));
  server.setRequestHandler("completion/complete", () => ({
    completion: { values: ["paris", "park", "party"], total: 3, hasMore: false },
  }));
  return server;
}

if (httpPort === null) {
  serveStdio(
    () => {
      const server = build();
      stdioInstances.add(server);
      return server;
    },
    { legacy: modernOnly ? "reject" : "serve" },
  );
} else {
  const handler = createMcpHandler(build, { legacy: modernOnly ? "reject" : "stateless", bus });
  serveFetch(httpPort, (request) => handler.fetch(request), () => {
    process.stderr.write(`conformance backend (2026-07-28) on http://127.0.0.1:${httpPort}/mcp\n`);
  });
}
