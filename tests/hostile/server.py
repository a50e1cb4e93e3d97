#!/usr/bin/env python3
"""A hostile MCP server for the safety tests: each tool misbehaves in one way
a real server might (by bug or by design), so the tests can check that the
aggregator stays responsive, bounded in memory and leaves no process behind.

Standard library only. Speaks newline-delimited JSON-RPC on stdio, or, with
--http PORT, Streamable HTTP on 127.0.0.1:PORT.

  --pid-file FILE   append this process's pid (and each grandchild's) to FILE
  --silent          never answer anything (not even initialize)
  --hang-list       answer initialize, never tools/list
  --get-status N    (HTTP) answer the listening GET with status N
  --tools N         offer N extra tools (a huge list)
  --wait-for FILE   answer initialize only once FILE exists (a slow start)
  --http PORT       serve Streamable HTTP instead of stdio (0: a free port;
                    "listening PORT" is printed on stdout either way)
  --stateless       (HTTP) no session id, and 404 to GET, as stateless
                    TypeScript SDK deployments answer
  --redirect-to URL (HTTP) answer every GET and every tools/call with a 307
                    to URL (with --redirect-all: every request)
  --capture FILE    (HTTP) record every request (method, path, headers,
                    body) as a JSON line in FILE and answer 404: the other
                    origin a secret must never reach
  --sse PORT        serve the legacy HTTP+SSE transport on 127.0.0.1:PORT,
                    naming --endpoint URL (default: its own /messages)
  --chat-mb N       (HTTP) answer POST /v1/chat/completions with a body of
                    N megabytes and no length (a classifier gone wrong)
  --huge-pages N    list tools in N more pages, each one tool whose
                    description is --huge-mb megabytes (default 20)
  --deep N          offer one more tool, `deep`, whose inputSchema is
                    nested N levels deep
  --escape-pids F   `escape` (and --escape-at-start) record the escaped
                    process's pid in F
  --escape-at-start start one escaped process (see `escape`) at start
  --fork-on-term    an escaped process forks another (recorded too) each
                    time it gets SIGTERM, instead of ignoring it
  --exit-after-ms N exit N ms after start (a server that crashes in a loop)
  --bad-header      offer one more tool, `bad_header`, whose x-mcp-header
                    annotation is used twice (invalid: clients must leave it out)
  --stderr-flood    write 8 KB lines to stderr as fast as it can, for ever
  --silent-unknown  never answer a method it does not know (as some 2025
                    servers do with `server/discover`)

Tools: fds, flood, huge_line, malformed, wrong_id, hang, exit, grandchild,
sample, ask_later, last_ask, echo, huge_body (HTTP), endless_event (HTTP), ndjson_ask (HTTP),
resumable (HTTP).
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

ARGS = None
# What the descriptors were before this script opened anything of its own.
FDS_AT_START = []
WRITE_LOCK = threading.Lock()
PENDING = {}  # our request id -> (event, [answer])
LAST_ASK = {"outcome": None}
NEXT_ID = [1]


def open_fds():
    found = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            found.append({"fd": int(name), "target": os.readlink(f"/proc/self/fd/{name}")})
        except OSError:
            pass  # the directory handle listdir itself used
    return found


TOOLS = [
    ("echo", "Echo the arguments back"),
    ("fds", "List the descriptors this process had when it started"),
    ("flood", "Send `count` progress (and, unless `logs` is false, log) notifications of `size` bytes, touch `done_file`, answer"),
    ("huge_line", "Write one line of `mb` megabytes (not JSON), then answer"),
    ("huge_answer", "Answer with a result of `mb` megabytes, its id written last (as the TypeScript "
                    "SDK does), or first with `id_first`"),
    ("malformed", "Write lines that are not JSON-RPC, then answer"),
    ("wrong_id", "Answer with an id that was never asked"),
    ("hang", "Never answer"),
    ("error_text", "Fail with an error whose message holds a newline and terminal escapes"),
    ("grow", "Offer one more tool (grown_N) from now on, and say the list changed"),
    ("break_list", "From now on answer tools/list with a `tools` that is not a list, and say the list changed"),
    ("exit", "Exit the process in the middle of the call"),
    ("grandchild", "Start a grandchild that ignores SIGTERM; answer its pid"),
    ("escape", "Start a process that leaves the process group (setsid, then a second fork), "
               "ignores SIGTERM and outlives its parent; answer its pid"),
    ("sample", "Ask the client for a sampling/createMessage during the call"),
    ("ask_later", "Answer at once, then ask the client for sampling outside any call"),
    ("last_ask", "What the last ask_later request got back"),
    ("listens", "How many subscriptions/listen requests came (with --modern)"),
    ("huge_body", "HTTP only: answer with a body of `mb` megabytes"),
    ("html_answer", "HTTP only: answer 200 with an HTML page"),
    ("empty_answer", "HTTP only: answer 200 with an empty body (the answer never comes)"),
    ("hang_post", "HTTP only: take the request and never send a response (not even headers)"),
    ("trickle", "HTTP only: answer 200 and send the body one space a second, for up to 300 s"),
    ("trickle_state", "HTTP only: whether the client hung up on the last trickle"),
    ("empty_stream", "HTTP only: answer with an event stream that ends with a log event and no "
                     "answer, and no event id to resume it from"),
    ("endless_event", "HTTP only: answer with an SSE event that never ends"),
    ("ndjson_ask", "HTTP only: answer as newline-delimited JSON frames: a log message, then an "
                   "elicitation/create request, and only once its answer came (POSTed back) the "
                   "result saying what the answer was"),
    ("resumable", "HTTP only: close the answer's event stream after a log event with an id and "
                  "`retry: 300`, and answer on the GET that resumes it (not sooner than asked)"),
]


BROKEN_LIST = [False]
GROWN = [0]
GET_COUNT = [0]
LISTENS = [0]
TRICKLE = {"hung_up": None}


def tool_list():
    tools = [
        {"name": name, "description": desc, "inputSchema": {"type": "object"}}
        for name, desc in TOOLS
    ]
    if ARGS.bad_header:
        tools.append({
            "name": "bad_header",
            "description": "Two arguments mirrored into one header",
            "inputSchema": {"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "Region"},
                "b": {"type": "string", "x-mcp-header": "region"}}},
        })
    for n in range(GROWN[0]):
        tools.append({"name": f"grown_{n + 1}", "description": "A tool added later",
                      "inputSchema": {"type": "object"}})
    for n in range(ARGS.tools):
        tools.append({
            "name": f"extra_{n}",
            "description": "An extra tool " + "x" * 200,
            "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}},
        })
    return tools


def deep_schema(depth):
    """A schema nested `depth` levels, written as text (json.dumps would
    recurse past Python's own limit)."""
    return '{"type": "object", "properties": {"a": ' * depth + '{"type": "string"}' + "}}" * depth


def tools_page(params):
    """The answer to tools/list: the tools, with --huge-pages after the
    first page, as JSON text."""
    cursor = params.get("cursor")
    if BROKEN_LIST[0]:
        return '{"tools": {"oops": 1}}'
    if ARGS.huge_pages and cursor is not None:
        page = int(cursor)
        tool = {"name": f"huge_{page}", "description": "h" * (ARGS.huge_mb * 1024 * 1024),
                "inputSchema": {"type": "object"}}
        result = {"tools": [tool]}
        if page + 1 < ARGS.huge_pages:
            result["nextCursor"] = str(page + 1)
        return json.dumps(result)
    tools = json.dumps(tool_list())
    if ARGS.deep:
        deep = '{"name": "deep", "description": "A tool with a deep schema", "inputSchema": ' \
            + deep_schema(ARGS.deep) + "}"
        tools = tools[:-1] + ", " + deep + "]"
    result = '{"tools": ' + tools
    if ARGS.huge_pages:
        result += ', "nextCursor": "0"'
    return result + "}"


def text_result(text):
    return {"content": [{"type": "text", "text": text}]}


def record_pid(pid):
    if ARGS.pid_file:
        with open(ARGS.pid_file, "a") as f:
            f.write(f"{pid}\n")


def start_grandchild():
    pid = os.fork()
    if pid == 0:
        # The grandchild: ignores SIGTERM, outlives its parent if allowed.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            os.closerange(0, 3)
        except OSError:
            pass
        while True:
            time.sleep(3600)
    record_pid(pid)
    return pid


def fork_again(*_):
    """Told to stop: start another process like this one instead."""
    if os.fork() == 0:
        if ARGS.escape_pids:
            with open(ARGS.escape_pids, "a") as f:
                f.write(f"{os.getpid()}\n")
        while True:
            time.sleep(3600)


def start_escapee():
    """setsid, fork again, ignore SIGTERM: what a daemonising helper (or a
    browser) does. Returns the escaped process's pid."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            if ARGS.fork_on_term:
                signal.signal(signal.SIGTERM, fork_again)
            else:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.close(read_end)
            os.write(write_end, str(os.getpid()).encode())
            os.close(write_end)
            try:
                os.closerange(0, 3)
            except OSError:
                pass
            while True:
                time.sleep(3600)
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    escaped = int(os.read(read_end, 32))
    os.close(read_end)
    if ARGS.escape_pids:
        with open(ARGS.escape_pids, "a") as f:
            f.write(f"{escaped}\n")
    return escaped


class StdioPeer:
    """Writes to the client on stdout."""

    def write_bytes(self, data):
        with WRITE_LOCK:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def send(self, message):
        self.write_bytes(encode(message) + b"\n")


def ask_client(peer, method, params, timeout=60):
    with WRITE_LOCK:
        rid = f"hostile-{NEXT_ID[0]}"
        NEXT_ID[0] += 1
    event = threading.Event()
    slot = []
    PENDING[rid] = (event, slot)
    peer.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    if not event.wait(timeout):
        PENDING.pop(rid, None)
        return {"timeout": True}
    return slot[0]


def sampling_params():
    return {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
        "maxTokens": 10,
    }


class ToolFailure(Exception):
    """A tool's JSON-RPC error, with its message."""


def call_tool(peer, rid, name, arguments, meta):
    """Runs one tool; returns the result, or None when it answers itself."""
    token = (meta or {}).get("progressToken")
    if name == "error_text":
        raise ToolFailure("it failed\nFAKE LINE \x1b[31mred\x1b[0m \x1b]52;c;aGk=\x07")
    if name == "echo":
        return text_result(json.dumps(arguments))
    if name == "grow":
        GROWN[0] += 1
        peer.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text_result(str(GROWN[0]))
    if name == "break_list":
        BROKEN_LIST[0] = True
        peer.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text_result("broken")
    if name == "fds":
        return text_result(json.dumps(FDS_AT_START))
    if name == "flood":
        count = int(arguments.get("count", 1000))
        pad = "p" * int(arguments.get("size", 1000))
        logs = arguments.get("logs", True)
        for n in range(count):
            if token is not None:
                peer.send({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {"progressToken": token, "progress": n, "message": pad}})
            if logs:
                peer.send({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": pad}})
        if arguments.get("done_file"):
            with open(arguments["done_file"], "w") as f:
                f.write("done")
        return text_result(f"sent {count}")
    if name == "huge_line":
        megabytes = int(arguments.get("mb", 100))
        chunk = b"z" * (1024 * 1024)
        with WRITE_LOCK:
            for _ in range(megabytes):
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.write(b"\n")
            sys.stdout.buffer.flush()
        return text_result("after the huge line")
    if name == "huge_answer":
        text = b"z" * (int(arguments.get("mb", 2)) * 1024 * 1024)
        content = b'{"content":[{"type":"text","text":"' + text + b'"}]}'
        rid_text = json.dumps(rid).encode()
        if arguments.get("id_first"):
            line = b'{"jsonrpc":"2.0","id":' + rid_text + b',"result":' + content + b'}'
        else:
            line = b'{"result":' + content + b',"jsonrpc":"2.0","id":' + rid_text + b'}'
        peer.write_bytes(line + b"\n")
        return None
    if name == "malformed":
        for junk in [b"not json at all", b"{\"jsonrpc\": \"2.0\", \"id\": ", b"[1, 2, 3]",
                     b"{\"jsonrpc\": \"2.0\", \"id\": \"nobody-asked\", \"result\": {}}",
                     b"{\"jsonrpc\": \"2.0\", \"method\": 42}", b"\xff\xfe\x00binary",
                     b"{" * 10000, b"null", b"{\"id\": 1, \"result\": {}}",
                     b"\r\x1b[2K2026-01-01T00:00:00.000000Z ERROR forged by the server"]:
            peer.write_bytes(junk + b"\n")
        return text_result("after the junk")
    if name == "wrong_id":
        wrong = (rid + 100000) if isinstance(rid, int) else f"{rid}-wrong"
        peer.send({"jsonrpc": "2.0", "id": wrong, "result": text_result("for someone else")})
        return None
    if name == "hang":
        return None
    if name == "exit":
        os._exit(3)
    if name == "grandchild":
        return text_result(str(start_grandchild()))
    if name == "escape":
        return text_result(str(start_escapee()))
    if name == "sample":
        return text_result(json.dumps(ask_client(peer, "sampling/createMessage", sampling_params())))
    if name == "ask_later":
        delay = float(arguments.get("delay_ms", 200)) / 1000

        def later():
            time.sleep(delay)
            LAST_ASK["outcome"] = ask_client(peer, "sampling/createMessage", sampling_params())

        LAST_ASK["outcome"] = None
        threading.Thread(target=later, daemon=True).start()
        return text_result("will ask later")
    if name == "last_ask":
        return text_result(json.dumps(LAST_ASK["outcome"]))
    if name == "listens":
        return text_result(str(LISTENS[0]))
    if name == "trickle_state":
        return text_result(json.dumps(TRICKLE["hung_up"]))
    raise KeyError(name)


class RawAnswer(str):
    """An answer already written as JSON text."""


def encode(answer):
    return answer.encode() if isinstance(answer, RawAnswer) else json.dumps(answer).encode()


def handle(peer, message):
    """Handles one message; returns the answer (or None)."""
    if not isinstance(message, dict):
        return None
    method = message.get("method")
    rid = message.get("id")
    if method is None:
        waiter = PENDING.pop(rid, None)
        if waiter:
            waiter[1].append(message)
            waiter[0].set()
        return None
    if rid is None:
        return None
    if ARGS.silent:
        return None
    params = message.get("params") or {}
    if method == "initialize":
        while ARGS.wait_for and not os.path.exists(ARGS.wait_for):
            time.sleep(0.02)
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}, "logging": {}},
            "serverInfo": {"name": "hostile", "version": "1.0"},
        }
    elif method == "server/discover" and ARGS.modern:
        result = {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": True}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "hostile", "version": "1.0"}},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list" and ARGS.hang_list:
        return None
    elif method == "tools/list":
        # Written as text: a deep schema cannot go through json.dumps.
        return RawAnswer('{"jsonrpc": "2.0", "id": ' + json.dumps(rid) + ', "result": '
                         + tools_page(params) + "}")
    elif method == "tools/call":
        try:
            result = call_tool(peer, rid, params.get("name"), params.get("arguments") or {},
                               params.get("_meta"))
        except KeyError:
            return {"jsonrpc": "2.0", "id": rid,
                    "error": {"code": -32602, "message": f"unknown tool {params.get('name')}"}}
        except ToolFailure as failure:
            return {"jsonrpc": "2.0", "id": rid,
                    "error": {"code": -32000, "message": str(failure)}}
        if result is None:
            return None
    elif ARGS.silent_unknown:
        return None
    else:
        return {"jsonrpc": "2.0", "id": rid,
                "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def serve_stdio():
    peer = StdioPeer()

    def work(message):
        answer = handle(peer, message)
        if answer is not None:
            peer.send(answer)

    for line in sys.stdin.buffer:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        # Answers to our own requests are taken at once; everything else
        # runs on its own thread so one hanging tool blocks nothing.
        if isinstance(message, dict) and message.get("method") is None:
            handle(peer, message)
        else:
            threading.Thread(target=work, args=(message,), daemon=True).start()


# Answers parked until the client resumes their stream: event id ->
# (when the stream was closed, the request id).
RESUMABLE = {}
RESUME_RETRY_MS = 300


def serve_http(port):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def body(self):
            length = int(self.headers.get("Content-Length", "0"))
            return self.rfile.read(length) if length else b""

        def captured(self, body):
            """Records the request and answers 404 when capturing."""
            if not ARGS.capture:
                return False
            with open(ARGS.capture, "a") as f:
                f.write(json.dumps({"method": self.command, "path": self.path,
                                    "headers": dict(self.headers.items()),
                                    "body": body.decode("utf-8", "replace")}) + "\n")
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True

        def redirected(self):
            """Answers a 307 to --redirect-to."""
            self.send_response(307)
            self.send_header("Location", ARGS.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True

        def do_GET(self):
            if self.captured(b""):
                return
            if ARGS.redirect_to:
                self.redirected()
                return
            last = self.headers.get("Last-Event-ID")
            parked = RESUMABLE.pop(last, None) if last else None
            if parked is not None:
                closed_at, rid = parked
                early = time.time() - closed_at < RESUME_RETRY_MS / 1000
                text = "resumed too early" if early else f"resumed after {last}"
                answer = {"jsonrpc": "2.0", "id": rid, "result": text_result(text)}
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(f"id: {last}-answer\ndata: {json.dumps(answer)}\n\n".encode())
                self.close_connection = True
                return
            GET_COUNT[0] += 1
            self.send_response(ARGS.get_status or (404 if ARGS.stateless else 405))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_then_close(self, text):
            """Answers with an event stream of one log message, then ends
            it: no answer, no event id to resume from."""
            log = {"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": text}}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(log)}\n\n".encode())
            self.close_connection = True

        def do_POST(self):
            raw = self.body()
            if self.captured(raw):
                return
            if ARGS.chat_mb and self.path.endswith("/chat/completions"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = b" " * (1024 * 1024)
                try:
                    for _ in range(ARGS.chat_mb):
                        self.wfile.write(chunk)
                except OSError:
                    pass
                self.close_connection = True
                return
            message = json.loads(raw or b"null")
            params = (message or {}).get("params") or {}
            if ARGS.redirect_to and (ARGS.redirect_all or message.get("method") == "tools/call"):
                self.redirected()
                return
            name = params.get("name") if message.get("method") == "tools/call" else None
            if (ARGS.html and "id" in message) or name == "html_answer":
                page = b"<!doctype html><html><body>Sign in to continue</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            if name == "trickle":
                TRICKLE["hung_up"] = False
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for _ in range(300):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(1)
                except OSError:
                    TRICKLE["hung_up"] = True
                return
            if name == "hang_post":
                time.sleep(300)
                return
            if name == "empty_answer":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if name == "empty_stream":
                self.log_then_close("no answer follows")
                return
            if name == "huge_body":
                megabytes = int((params.get("arguments") or {}).get("mb", 100))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(megabytes * 1024 * 1024))
                self.end_headers()
                chunk = b" " * (1024 * 1024)
                try:
                    for _ in range(megabytes):
                        self.wfile.write(chunk)
                except OSError:
                    pass
                return
            if name == "endless_event":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                try:
                    self.wfile.write(b"event: message\ndata: ")
                    chunk = b"y" * 65536
                    deadline = time.time() + 120
                    while time.time() < deadline:
                        self.wfile.write(chunk)
                except OSError:
                    pass
                self.close_connection = True
                return
            if name == "ndjson_ask":
                # Frames as a server that streams newline-delimited JSON
                # writes them: the request's answer arrives as its own POST
                # while this response is still open.
                ask_id = f"ask-{message.get('id')}"
                event, slot = threading.Event(), []
                PENDING[ask_id] = (event, slot)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                log = {"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "data": "asking in band"}}
                ask = {"jsonrpc": "2.0", "id": ask_id, "method": "elicitation/create",
                       "params": {"message": "Proceed?", "requestedSchema": {
                           "type": "object", "properties": {"ok": {"type": "boolean"}}}}}
                self.wfile.write((json.dumps(log) + "\n" + json.dumps(ask) + "\n").encode())
                self.wfile.flush()
                answered = event.wait(60)
                PENDING.pop(ask_id, None)
                if answered and slot:
                    reply = slot[0]
                    got = ("error " + str((reply.get("error") or {}).get("code"))
                           if "error" in reply else "result " + json.dumps(reply.get("result")))
                    text = f"answered in band: {got}"
                else:
                    text = "no answer in band"
                final = {"jsonrpc": "2.0", "id": message.get("id"), "result": text_result(text)}
                self.wfile.write((json.dumps(final) + "\n").encode())
                self.close_connection = True
                return
            if name == "resumable":
                event_id = f"ev-{message.get('id')}"
                log = {"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "data": "before the break"}}
                # Parked before the stream is written, so no resumption can
                # arrive first; the time is when the client can first know.
                RESUMABLE[event_id] = (time.time(), message.get("id"))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(
                    f"id: {event_id}\nretry: {RESUME_RETRY_MS}\ndata: {json.dumps(log)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True
                return
            if ARGS.modern and message.get("method") == "subscriptions/listen":
                # The subscription's stream is cut (as a proxy's idle
                # timeout does): no answer, no event id to resume from.
                LISTENS[0] += 1
                self.log_then_close("listening")
                return
            answer = handle(HttpPeer(), message)
            if answer is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = encode(answer)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if isinstance(message, dict) and message.get("method") == "initialize" \
                    and not ARGS.stateless:
                self.send_header("Mcp-Session-Id", "hostile-session")
            self.end_headers()
            self.wfile.write(body)

    class HttpPeer:
        def send(self, message):
            pass

        def write_bytes(self, data):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    announce(server)
    server.serve_forever()


def announce(server):
    """Says on stdout which port it listens on (asked for port 0: the
    system's choice, so two servers never race for one port)."""
    print(f"listening {server.server_address[1]}", flush=True)


def serve_sse(port):
    """The legacy HTTP+SSE transport: GET /sse names the endpoint, POSTs
    to it are answered on the stream."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import queue

    streams = []

    class SsePeer:
        def send(self, message):
            for q in list(streams):
                q.put(encode(message).decode())

        def write_bytes(self, data):
            pass

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            q = queue.Queue()
            streams.append(q)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            own = self.server.server_address[1]
            endpoint = ARGS.endpoint or f"http://127.0.0.1:{own}/messages"
            try:
                # Answers to requests not yet sent, before the endpoint
                # that lets any be sent.
                for n in range(20 if ARGS.early_answers else 0):
                    early = {"jsonrpc": "2.0", "id": n, "result": {"hijack": n}}
                    self.wfile.write(f"event: message\ndata: {json.dumps(early)}\n\n".encode())
                self.wfile.write(f"event: endpoint\ndata: {endpoint}\n\n".encode())
                self.wfile.flush()
                while True:
                    data = q.get()
                    self.wfile.write(f"event: message\ndata: {data}\n\n".encode())
                    self.wfile.flush()
            except OSError:
                streams.remove(q)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            message = json.loads(self.rfile.read(length) or b"null")
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            peer = SsePeer()
            answer = handle(peer, message)
            if answer is not None:
                peer.send(answer)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    announce(server)
    server.serve_forever()


def main():
    global ARGS, FDS_AT_START
    FDS_AT_START = open_fds()
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid-file")
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--hang-list", action="store_true")
    parser.add_argument("--get-status", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--silent-unknown", action="store_true")
    parser.add_argument("--http", type=int)
    parser.add_argument("--wait-for")
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--html", action="store_true")
    parser.add_argument("--modern", action="store_true")
    parser.add_argument("--early-answers", action="store_true")
    parser.add_argument("--redirect-to")
    parser.add_argument("--redirect-all", action="store_true")
    parser.add_argument("--capture")
    parser.add_argument("--sse", type=int)
    parser.add_argument("--endpoint")
    parser.add_argument("--chat-mb", type=int, default=0)
    parser.add_argument("--huge-pages", type=int, default=0)
    parser.add_argument("--huge-mb", type=int, default=20)
    parser.add_argument("--deep", type=int, default=0)
    parser.add_argument("--stderr-flood", action="store_true")
    parser.add_argument("--bad-header", action="store_true")
    parser.add_argument("--escape-pids")
    parser.add_argument("--escape-at-start", action="store_true")
    parser.add_argument("--fork-on-term", action="store_true")
    parser.add_argument("--exit-after-ms", type=int, default=0)
    ARGS = parser.parse_args()
    record_pid(os.getpid())
    if ARGS.escape_at_start:
        start_escapee()
    if ARGS.exit_after_ms:
        threading.Timer(ARGS.exit_after_ms / 1000, lambda: os._exit(4)).start()
    if ARGS.stderr_flood:
        def flood():
            line = ("e" * 8192 + "\n").encode()
            while True:
                try:
                    sys.stderr.buffer.write(line)
                    sys.stderr.buffer.flush()
                except OSError:
                    return
        threading.Thread(target=flood, daemon=True).start()
    if ARGS.sse is not None:
        serve_sse(ARGS.sse)
    elif ARGS.http is not None:
        serve_http(ARGS.http)
    else:
        serve_stdio()


if __name__ == "__main__":
    main()
