// What a Node SDK 1.x client spends per call (process.cpuUsage, its own
// CPU only) talking to the same Node echo server three ways: directly,
// through a byte relay in the middle (target/release/mcp-line-relay: any
// process in the middle, same bytes), and through `mcp-aggregator stdio`
// (the echo server as `echo`). Rounds alternate; the first is warm-up.
//
// Run (after scripts/setup.sh and a release build with --features fixture):
//   node benches/node/client_cpu.mjs
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

const echo = path.join(here, 'echo.mjs');
const release = path.join(repo, 'target/release');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-client-cpu-'));
const config = path.join(dir, 'config.json');
fs.writeFileSync(config, JSON.stringify({ mcpServers: { echo: { command: process.execPath, args: [echo] } } }));
const setups = {
  direct: [process.execPath, [echo], 'echo'],
  'byte relay': [path.join(release, 'mcp-line-relay'), [process.execPath, echo], 'echo'],
  aggregator: [path.join(release, 'mcp-aggregator'), ['stdio', '--config', config, '--data-dir', path.join(dir, 'data'), '--idle-exit', '0s'], 'echo__echo'],
};
const CALLS = 2000;
const clients = [];
for (const [label, [command, args, tool]] of Object.entries(setups)) {
  const client = new Client({ name: 'client-cpu', version: '1.0.0' }, { capabilities: {} });
  await client.connect(new StdioClientTransport({ command, args, stderr: 'ignore' }));
  for (;;) {
    const { tools } = await client.listTools();
    if (tools.some((t) => t.name === tool)) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  clients.push({ label, client, tool, cpu: [], wall: [] });
}
// Start-up work (indexing the tools) settles.
await new Promise((resolve) => setTimeout(resolve, 3000));
for (let round = 0; round < 4; round++) {
  for (const c of clients) {
    const cpu = process.cpuUsage();
    const began = process.hrtime.bigint();
    for (let i = 0; i < CALLS; i++) await c.client.callTool({ name: c.tool, arguments: { message: 'hello', i } });
    const used = process.cpuUsage(cpu);
    if (round > 0) {
      c.cpu.push((used.user + used.system) / CALLS);
      c.wall.push(Number(process.hrtime.bigint() - began) / CALLS / 1000);
    }
  }
}
for (const c of clients) {
  console.log(`${c.label}: client CPU per call ${c.cpu.map((v) => v.toFixed(0)).join(' / ')} µs; wall per call ${c.wall.map((v) => v.toFixed(0)).join(' / ')} µs`);
}
for (const c of clients) await c.client.close();
fs.rmSync(dir, { recursive: true, force: true });
