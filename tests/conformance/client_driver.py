#!/usr/bin/env python3
"""The conformance runner's client under test is the aggregator: the runner
starts a scenario server and runs this driver with its URL. The driver
starts `mcp-aggregator serve` (binary from MCP_AGGREGATOR_BIN) with that
server registered over Streamable HTTP, lists the tools at `/mcp` (the first
list waits for the server to be connected and discovered) and calls each of
them there with arguments built from its input schema - so everything the
scenario server sees comes from the aggregator as a client. Standard
library only.

    client_driver.py <server url>
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

DEADLINE = 20
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def http(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    request.add_header("accept", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def example(schema):
    """A value the schema accepts (enough for a conformance call)."""
    kind = schema.get("type")
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return arguments_for(schema)
    return "conformance"


def arguments_for(schema):
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    return {name: example(properties.get(name) or {}) for name in required}


def main():
    url = sys.argv[-1]
    binary = os.environ["MCP_AGGREGATOR_BIN"]
    work = tempfile.mkdtemp(prefix="conformance-client-")
    config = os.path.join(work, "servers.json")
    with open(config, "w") as out:
        json.dump({"mcpServers": {"scenario": {"type": "http", "url": url}}}, out)
    data = os.path.join(work, "data")
    # Keyword search only: a daemon per scenario need not load the model.
    env = dict(os.environ, MCP_AGGREGATOR_SKIP_EMBEDDED_RUNTIME="1", ORT_DYLIB_PATH="/nonexistent")
    daemon = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--config", config, "--data-dir", data],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.time() + DEADLINE
        api = None
        while api is None and time.time() < end:
            try:
                with open(os.path.join(data, "daemon.json")) as info:
                    api = json.load(info)["url"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        mcp = f"{api}/mcp"
        status, listed = http(
            "POST",
            mcp,
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}},
            {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"},
        )
        tools = [
            tool
            for tool in ((listed or {}).get("result") or {}).get("tools", [])
            if tool.get("name", "").startswith("scenario__")
        ]
        for n, tool in enumerate(tools):
            name = tool["name"]
            status, answer = http(
                "POST",
                mcp,
                {
                    "jsonrpc": "2.0",
                    "id": n + 2,
                    "method": "tools/call",
                    "params": {
                        "name": name,
                        "arguments": arguments_for(tool.get("inputSchema") or {}),
                        "_meta": META,
                    },
                },
                {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": name},
            )
            print(json.dumps({"tool": name, "status": status}), file=sys.stderr)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        shutil.rmtree(work, ignore_errors=True)


main()
