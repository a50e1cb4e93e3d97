#!/usr/bin/env python3
"""The conformance runner's client under test is the aggregator: the runner
starts a scenario server and runs this driver with its URL. The driver
starts `mcp-aggregator serve` (binary from MCP_AGGREGATOR_BIN) with that
server registered over Streamable HTTP, lists the tools at `/mcp` (the first
list waits for the server to be connected and discovered) and calls them
there as a 2026-07-28 client would: the calls the scenario's context names
(MCP_CONFORMANCE_CONTEXT `toolCalls`), else each tool with arguments built
from its input schema; an input-required result is answered (accept, a
sampled text, no roots) and the call retried with its `requestState` - so
everything the scenario server sees comes from the aggregator as a client.
Standard library only.

    client_driver.py <server url>
"""

import base64
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
    # What `answer` below can answer (roots: none are shared).
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}},
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


def answer(request):
    """A client's answer to one of a server's input requests."""
    method = request.get("method")
    params = request.get("params") or {}
    if method == "elicitation/create":
        schema = params.get("requestedSchema") or {}
        return {"action": "accept", "content": arguments_for(schema)}
    if method == "sampling/createMessage":
        return {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "driver"}
    if method == "roots/list":
        return {"roots": []}
    return {}


def header_value(text):
    """A value as an Mcp-Param header carries it (base64 unless plain ASCII)."""
    plain = (
        text != ""
        and all(0x20 <= ord(c) <= 0x7E for c in text)
        and not text.startswith(" ")
        and not text.endswith(" ")
        and not (text.startswith("=?base64?") and text.endswith("?="))
    )
    if plain or text == "":
        return text
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def param_headers(schema, arguments, path=()):
    """The Mcp-Param headers of a call: the arguments the schema marks with x-mcp-header."""
    headers = {}
    for key, prop in (schema.get("properties") or {}).items():
        value = arguments.get(key) if isinstance(arguments, dict) else None
        if "x-mcp-header" in prop and value is not None:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            headers["mcp-param-" + prop["x-mcp-header"]] = header_value(text)
        if isinstance(value, dict):
            headers.update(param_headers(prop, value))
    return headers


def call(mcp, request_id, name, arguments, schema=None):
    """A tools/call, its input-required rounds answered and retried."""
    params = {"name": name, "arguments": arguments, "_meta": META}
    headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": name}
    headers.update(param_headers(schema or {}, arguments))
    for _ in range(5):
        request_id += 1
        status, answer_ = http(
            "POST", mcp, {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}, headers
        )
        result = (answer_ or {}).get("result") or {}
        print(json.dumps({"tool": name, "status": status, "resultType": result.get("resultType"), "answer": answer_}), file=sys.stderr)
        if result.get("isError") and "needs a login" in json.dumps(result.get("content")) and LOGIN["api"]:
            relogin = LOGIN["api"]
            LOGIN["api"] = None  # once per call chain: a server that keeps refusing is not looped
            log_in_again(relogin)
            continue
        if result.get("resultType") != "input_required":
            break
        params = {
            "name": name,
            "arguments": arguments,
            "_meta": META,
            "inputResponses": {key: answer(asked) for key, asked in (result.get("inputRequests") or {}).items()},
        }
        if "requestState" in result:
            params["requestState"] = result["requestState"]
    return request_id


LOGIN = {"api": None}


def log_in_again(api):
    """A step-up: the server asked for more scope during a call."""
    end = time.time() + DEADLINE
    while time.time() < end:
        status, record = http("GET", f"{api}/api/v1/aggregator/servers/scenario")
        auth = (record or {}).get("auth") or {}
        if auth.get("authorization_url"):
            try:
                with urllib.request.urlopen(auth["authorization_url"], timeout=DEADLINE) as response:
                    response.read()
            except OSError as err:
                print(json.dumps({"step_up": str(err)}), file=sys.stderr)
            return
        if auth.get("state") != "authorized":
            return
        time.sleep(0.1)


def log_in(api, end):
    """Waits until the scenario server is connected; while it waits for a
    login, its authorization URL is opened as a browser would (the
    scenario's authorization server approves without a user and sends the
    browser back to the daemon's callback)."""
    opened = set()
    while time.time() < end:
        status, record = http("GET", f"{api}/api/v1/aggregator/servers/scenario")
        record = record or {}
        if record.get("status") in ("CONNECTED", "DEGRADED"):
            return
        auth = record.get("auth") or {}
        target = auth.get("authorization_url")
        if target and target not in opened:
            opened.add(target)
            print(json.dumps({"login": auth.get("state")}), file=sys.stderr)
            try:
                with urllib.request.urlopen(target, timeout=DEADLINE) as response:
                    response.read()
            except urllib.error.HTTPError as err:
                print(json.dumps({"callback": err.code, "detail": err.read().decode(errors="replace")}), file=sys.stderr)
            except OSError as err:
                print(json.dumps({"callback": str(err)}), file=sys.stderr)
        elif auth.get("state") == "failed":
            print(json.dumps({"login_failed": auth.get("detail")}), file=sys.stderr)
            return
        time.sleep(0.1)


def main():
    url = sys.argv[-1]
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    binary = os.environ["MCP_AGGREGATOR_BIN"]
    work = tempfile.mkdtemp(prefix="conformance-client-")
    config = os.path.join(work, "servers.json")
    server = {"type": "http", "url": url}
    # A pre-registered OAuth client, when the scenario hands one.
    oauth = {key: context[key] for key in ("client_id", "client_secret") if context.get(key)}
    if os.environ.get("MCP_CONFORMANCE_SCENARIO", "").startswith("auth/"):
        # Where this client's metadata document is published (the address
        # the suite's authorization servers know); used only where the
        # authorization server takes metadata documents as client ids.
        oauth["client_metadata_url"] = "https://conformance-test.local/client-metadata.json"
    if oauth:
        server["oauth"] = oauth
    with open(config, "w") as out:
        json.dump({"mcpServers": {"scenario": server}}, out)
    data = os.path.join(work, "data")
    # Keyword search only: a daemon per scenario need not load the model.
    env = dict(os.environ, MCP_AGGREGATOR_SKIP_EMBEDDED_RUNTIME="1", ORT_DYLIB_PATH="/nonexistent")
    # CONFORMANCE_DAEMON_LOG=FILE keeps the daemon's log (for debugging).
    log_path = os.environ.get("CONFORMANCE_DAEMON_LOG")
    log = open(log_path, "a") if log_path else subprocess.DEVNULL
    daemon = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--config", config, "--data-dir", data],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
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
        log_in(api, end)
        LOGIN["api"] = api
        status, listed = http(
            "POST",
            mcp,
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}},
            {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"},
        )
        tools = {
            tool["name"]: tool
            for tool in ((listed or {}).get("result") or {}).get("tools", [])
            if tool.get("name", "").startswith("scenario__")
        }
        request_id = 1
        if context.get("toolCalls"):
            for planned in context["toolCalls"]:
                name = "scenario__" + planned["name"]
                schema = (tools.get(name) or {}).get("inputSchema")
                request_id = call(mcp, request_id, name, planned.get("arguments") or {}, schema)
        elif "scenario__json_schema_echo" in tools:
            # json-schema-2020-12-preservation: hand the focal tool's
            # schema, as listed, back to the echo tool.
            focal = tools.get("scenario__json_schema_2020_12_tool") or {}
            request_id = call(
                mcp, request_id, "scenario__json_schema_echo", {"schema": focal.get("inputSchema")}
            )
        else:
            for name, tool in tools.items():
                schema = tool.get("inputSchema") or {}
                request_id = call(mcp, request_id, name, arguments_for(schema), schema)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        shutil.rmtree(work, ignore_errors=True)


main()
