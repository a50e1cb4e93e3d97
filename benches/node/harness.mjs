// The front door as a Node user's harness sees it: a raw JSON-RPC driver
// (no SDK) talking to a child over the stdio Node gives it (a Unix
// socketpair, as Claude Desktop, VS Code and Cursor do), direct to a Node
// echo server (no SDK) and through `mcp-aggregator stdio` with that echo
// server and server-everything behind it, the model loaded. Five
// alternating rounds: sequential p50 and throughput with 32 in flight, and
// the ratio of through to direct per round (report the median).
//
// Run (after scripts/setup.sh and a release build):
//   node benches/node/harness.mjs target/release/mcp-aggregator [rmcp-echo]
// With `rmcp-echo`, our raw Rust echo server (target/release/mcp-echo-server,
// built with --features fixture) is behind the aggregator instead.
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const [aggregator, backendKind] = process.argv.slice(2);
if (!aggregator) {
  console.error('usage: node benches/node/harness.mjs <mcp-aggregator binary> [rmcp-echo]');
  process.exit(2);
}
const echo = path.join(here, 'echo.mjs');
const backend = backendKind === 'rmcp-echo'
  ? { command: path.join(path.dirname(aggregator), 'mcp-echo-server'), args: [] }
  : { command: process.execPath, args: [echo] };
const everything = path.join(repo, 'tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-harness-'));
const config = path.join(dir, 'config.json');
fs.writeFileSync(config, JSON.stringify({ mcpServers: {
  echo: backend,
  everything: { command: process.execPath, args: [everything, 'stdio'] },
} }));

function start(command, args) {
  const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'ignore'] });
  const lines = readline.createInterface({ input: child.stdout });
  const waiting = new Map();
  let next = 1;
  lines.on('line', (line) => {
    const message = JSON.parse(line);
    if (message.id !== undefined && waiting.has(message.id)) {
      const resolve = waiting.get(message.id);
      waiting.delete(message.id);
      resolve(message);
    }
  });
  const request = (method, params) => new Promise((resolve) => {
    const id = next++;
    waiting.set(id, resolve);
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  });
  return { child, request };
}

async function initialise(client, tool) {
  await client.request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'harness', version: '0' } });
  client.child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
  const deadline = Date.now() + 60_000;
  for (;;) {
    const listed = await client.request('tools/list', {});
    if (listed.result.tools.some((t) => t.name === tool)) return;
    if (Date.now() > deadline) throw new Error(`${tool} never listed`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function sequentialP50(client, tool, calls) {
  const times = [];
  for (let i = 0; i < calls; i++) {
    const began = process.hrtime.bigint();
    await client.request('tools/call', { name: tool, arguments: { message: 'hello', i } });
    times.push(Number(process.hrtime.bigint() - began) / 1000);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

async function throughput(client, tool, calls, inFlight) {
  const began = process.hrtime.bigint();
  let sent = 0;
  const worker = async () => {
    while (sent < calls) {
      sent++;
      await client.request('tools/call', { name: tool, arguments: { message: 'hello', i: sent } });
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return calls / (Number(process.hrtime.bigint() - began) / 1e9);
}

const direct = start(backend.command, backend.args);
await initialise(direct, 'echo');
const through = start(aggregator, ['stdio', '--config', config, '--data-dir', path.join(dir, 'data'), '--idle-exit', '0s']);
await initialise(through, 'echo__echo');
await initialise(through, 'everything__echo');
await through.request('tools/call', { name: 'search_tools', arguments: { query: 'echo a message' } });
// Start-up work (indexing the tools) settles.
await new Promise((resolve) => setTimeout(resolve, 5000));
const added = [];
const ratios = [];
for (let round = 0; round < 5; round++) {
  const directP50 = await sequentialP50(direct, 'echo', 2000);
  const throughP50 = await sequentialP50(through, 'echo__echo', 2000);
  const directRate = await throughput(direct, 'echo', 10000, 32);
  const throughRate = await throughput(through, 'echo__echo', 10000, 32);
  added.push(throughP50 - directP50);
  ratios.push(throughRate / directRate);
  console.log(`round ${round}: p50 direct ${directP50.toFixed(0)} µs, through ${throughP50.toFixed(0)} µs; 32 in flight: direct ${directRate.toFixed(0)}/s, through ${throughRate.toFixed(0)}/s (${(throughRate / directRate).toFixed(2)}x)`);
}
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
console.log(`median added p50 ${median(added).toFixed(0)} µs; median throughput ratio ${median(ratios).toFixed(2)}x`);
direct.child.kill();
through.child.kill();
fs.rmSync(dir, { recursive: true, force: true });
