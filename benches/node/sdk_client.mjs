// The front door as a Node SDK 1.x user sees it: the official
// `@modelcontextprotocol/sdk` Client on a StdioClientTransport (Node gives
// the child a Unix socketpair, as Claude Desktop, VS Code and Cursor do),
// direct to a Node echo server and through `mcp-aggregator stdio` with that
// echo server and server-everything behind it, the model loaded. Per round:
// sequential p50, throughput with 32 in flight, and the client's own CPU per
// sequential call (process.cpuUsage): what our output costs the client.
//
// Run (after scripts/setup.sh and a release build):
//   node benches/node/sdk_client.mjs target/release/mcp-aggregator [extra aggregator args...]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const require = createRequire(path.join(repo, 'tests/conformance/package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');

const [aggregator, ...extra] = process.argv.slice(2);
if (!aggregator) {
  console.error('usage: node benches/node/sdk_client.mjs <mcp-aggregator binary> [args...]');
  process.exit(2);
}
const echo = path.join(here, 'echo.mjs');
const everything = path.join(repo, 'tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-sdk-harness-'));
const config = path.join(dir, 'config.json');
fs.writeFileSync(config, JSON.stringify({ mcpServers: {
  echo: { command: process.execPath, args: [echo] },
  everything: { command: process.execPath, args: [everything, 'stdio'] },
} }));

async function connect(command, args) {
  const client = new Client({ name: 'sdk-harness', version: '1.0.0' }, { capabilities: {} });
  await client.connect(new StdioClientTransport({ command, args, stderr: 'ignore' }));
  return client;
}

async function waitFor(client, tool) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { tools } = await client.listTools();
    if (tools.some((t) => t.name === tool)) return;
    if (Date.now() > deadline) throw new Error(`${tool} never listed`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function sequential(client, tool, calls) {
  const times = [];
  const cpu = process.cpuUsage();
  for (let i = 0; i < calls; i++) {
    const began = process.hrtime.bigint();
    await client.callTool({ name: tool, arguments: { message: 'hello', i } });
    times.push(Number(process.hrtime.bigint() - began) / 1000);
  }
  const used = process.cpuUsage(cpu);
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(times.length / 2)], cpu: (used.user + used.system) / calls };
}

async function throughput(client, tool, calls, inFlight) {
  const began = process.hrtime.bigint();
  let sent = 0;
  const worker = async () => {
    while (sent < calls) {
      sent++;
      await client.callTool({ name: tool, arguments: { message: 'hello', i: sent } });
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return calls / (Number(process.hrtime.bigint() - began) / 1e9);
}

const direct = await connect(process.execPath, [echo]);
await waitFor(direct, 'echo');
const through = await connect(aggregator, ['stdio', '--config', config, '--data-dir', path.join(dir, 'data'), '--idle-exit', '0s', ...extra]);
await waitFor(through, 'echo__echo');
await waitFor(through, 'everything__echo');
await through.callTool({ name: 'search_tools', arguments: { query: 'echo a message' } });
// Start-up work (indexing the tools) settles.
await new Promise((resolve) => setTimeout(resolve, 5000));
const rounds = [];
for (let round = 0; round < 5; round++) {
  const d = await sequential(direct, 'echo', 2000);
  const t = await sequential(through, 'echo__echo', 2000);
  const directRate = await throughput(direct, 'echo', 10000, 32);
  const throughRate = await throughput(through, 'echo__echo', 10000, 32);
  rounds.push({ added: t.p50 - d.p50, ratio: throughRate / directRate, cpuDirect: d.cpu, cpuThrough: t.cpu });
  console.log(`round ${round}: p50 direct ${d.p50.toFixed(0)} µs, through ${t.p50.toFixed(0)} µs; client CPU per call direct ${d.cpu.toFixed(0)} µs, through ${t.cpu.toFixed(0)} µs; 32 in flight: ${(throughRate / directRate).toFixed(2)}x direct (${throughRate.toFixed(0)}/s)`);
}
const median = (key) => [...rounds.map((r) => r[key])].sort((a, b) => a - b)[Math.floor(rounds.length / 2)];
console.log(`median: added p50 ${median('added').toFixed(0)} µs; client CPU per call ${median('cpuDirect').toFixed(0)} µs direct, ${median('cpuThrough').toFixed(0)} µs through; throughput ${median('ratio').toFixed(2)}x direct`);
await direct.close();
await through.close();
fs.rmSync(dir, { recursive: true, force: true });
