#!/usr/bin/env python3
"""What a hostile server costs the release binary: the figures of
BENCHMARKS.md "Hostile input and failing disks". Standard library only;
drives `mcp-aggregator serve` with the hostile fixture server
(tests/hostile/server.py) and prints a Markdown table.

  python3 benches/hostile/probes.py [--binary target/release/mcp-aggregator]

Probes (each on a fresh data dir, loopback only, bounded in time):
  lists       one server listing 30 pages of one 20 MB tool each: peak RSS,
              store size, bytes of one client's tools/list
  classifier  an LLM classifier answering 300 MB bodies (5 in flight):
              peak RSS
  stderr      a server writing 8 KB stderr lines as fast as it can, 5 s:
              bytes the daemon's log grew by
  crashloop   a server that leaves a process out of its group at every
              start and crashes 300 ms later, 20 s: processes left alive
  redirect    a Streamable HTTP server with secret headers answering 307 to
              another port: requests (and bytes) that reached that port
  disk        (root) the data dir on a 16 MB tmpfs filled up, then freed:
              the answers meanwhile, the time until writes work again,
              acknowledged writes lost, ERROR lines logged
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTILE = os.path.join(ROOT, "tests", "hostile", "server.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Peak:
    """Samples a process's RSS every 5 ms in a thread."""

    def __init__(self, pid):
        self.pid, self.peak, self.running = pid, 0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.005)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.peak


def request(url, body=None, method=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json, text/event-stream")
    try:
        with urllib.request.urlopen(req, timeout=120) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


class Daemon:
    def __init__(self, binary, extra=()):
        self.dir = tempfile.mkdtemp(prefix="probe-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(self.dir, "daemon.log")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir",
             os.path.join(self.dir, "data"), *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if request(self.url + "/healthz")[0] in (200, 503):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the daemon did not start")

    def register(self, body):
        return request(self.url + "/api/v1/aggregator/servers", body)

    def server(self, name):
        return json.loads(request(f"{self.url}/api/v1/aggregator/servers/{name}")[1])

    def wait(self, check, seconds, what):
        deadline = time.time() + seconds
        while time.time() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tools_list(url):
    """One 2025 client's tools/list over /mcp: the answer's bytes."""
    init = urllib.request.Request(url + "/mcp", data=json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"}}}).encode(), method="POST")
    for req in (init,):
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/event-stream")
    with urllib.request.urlopen(init, timeout=60) as answer:
        session = answer.headers["Mcp-Session-Id"]
        answer.read()
    listing = urllib.request.Request(url + "/mcp", data=json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode(), method="POST")
    listing.add_header("Content-Type", "application/json")
    listing.add_header("Accept", "application/json, text/event-stream")
    listing.add_header("Mcp-Session-Id", session)
    with urllib.request.urlopen(listing, timeout=60) as answer:
        return answer.read()


def hostile(name, *args):
    return {"name": name, "transport_type": "STDIO", "auto_connect": True,
            "connection_config": {"command": sys.executable, "args": [HOSTILE, *args]}}


def probe_lists(binary):
    d = Daemon(binary)
    time.sleep(1)  # let the model load settle before the baseline
    base = rss_kib(d.proc.pid)
    peak = Peak(d.proc.pid)
    d.register(hostile("huge", "--huge-pages", "30", "--huge-mb", "20"))
    d.wait(lambda: any(t["original_name"] == "huge_0" for t in json.loads(
        request(d.url + "/api/v1/aggregator/servers/huge/tools")[1])), 120, "the list")
    time.sleep(2)
    top = peak.stop()
    listed = tools_list(d.url)
    store = os.path.getsize(os.path.join(d.dir, "data", "store.redb"))
    d.stop()
    return [("30 pages of one 20 MB tool: daemon RSS before / peak", f"{base // 1024} / {top // 1024} MiB"),
            ("store.redb after", f"{store / 1048576:.1f} MiB"),
            ("one client's tools/list", f"{len(listed) / 1024:.1f} KiB")]


def probe_classifier(binary):
    port = free_port()
    chat = subprocess.Popen([sys.executable, HOSTILE, "--http", str(port), "--chat-mb", "300"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    d = Daemon(binary, ["--classifier-url", f"http://127.0.0.1:{port}/v1", "--classifier-timeout", "120"])
    peak = Peak(d.proc.pid)
    d.register(hostile("many", "--tools", "40"))

    def tried():
        tools = json.loads(request(d.url + "/api/v1/aggregator/servers/many/tools")[1])
        return tools and all(t.get("classification_error") for t in tools)

    d.wait(tried, 300, "the classifier's answers")
    top = peak.stop()
    d.stop()
    chat.kill()
    chat.wait()
    return [("classifier answering 300 MB bodies: daemon peak RSS", f"{top // 1024} MiB")]


def probe_stderr(binary):
    d = Daemon(binary)
    d.register(hostile("noisy", "--stderr-flood"))
    d.wait(lambda: d.server("noisy")["status"] == "CONNECTED", 60, "the server")
    before = os.path.getsize(d.log)
    time.sleep(5)
    grown = os.path.getsize(d.log) - before
    d.stop()
    return [("server flooding stderr for 5 s: daemon log growth", f"{grown / 1024:.0f} KiB")]


def probe_crashloop(binary):
    d = Daemon(binary)
    pids = os.path.join(d.dir, "escaped.pids")
    d.register(hostile("crashy", "--escape-at-start", "--exit-after-ms", "300", "--escape-pids", pids))
    time.sleep(20)

    def alive():
        if not os.path.exists(pids):
            return [], []
        seen = [int(p) for p in open(pids).read().split()]
        return seen, [p for p in seen if os.path.exists(f"/proc/{p}")]

    seen, during = alive()
    request(d.url + "/api/v1/aggregator/servers/crashy", method="DELETE")
    time.sleep(2)
    _, after = alive()
    d.stop()
    for p in after:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return [(f"crash loop, 20 s ({len(seen)} starts): escaped processes alive during / after removal",
             f"{len(during)} / {len(after)}")]


def probe_redirect(binary):
    capture_file = os.path.join(tempfile.mkdtemp(prefix="capture-"), "captured.jsonl")
    other = free_port()
    capture = subprocess.Popen([sys.executable, HOSTILE, "--http", str(other), "--capture", capture_file],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = free_port()
    redirecting = subprocess.Popen([sys.executable, HOSTILE, "--http", str(port), "--redirect-to",
                                    f"http://localhost:{other}/steal"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    d = Daemon(binary)
    d.register({"name": "moved", "transport_type": "HTTP", "auto_connect": True,
                "connection_config": {"base_url": f"http://127.0.0.1:{port}/mcp",
                                      "headers": {"Authorization": "Bearer s3cret", "X-Api-Key": "k3y",
                                                  "Private-Token": "t0ken"}}})
    d.wait(lambda: d.server("moved")["status"] == "CONNECTED", 60, "the server")
    for _ in range(5):
        request(d.url + "/api/v1/tools/call", {"name": "moved.echo", "arguments": {"secret": "x" * 1000}})
    time.sleep(1)
    d.stop()
    captured = open(capture_file).read() if os.path.exists(capture_file) else ""
    for p in (capture, redirecting):
        p.kill()
        p.wait()
    return [("307 to another origin (5 calls): requests / bytes that reached it",
             f"{len(captured.splitlines())} / {len(captured.encode())}")]


def probe_disk(binary):
    """Needs root (a tmpfs is mounted under the data dir)."""
    mount = tempfile.mkdtemp(prefix="disk-")
    if os.geteuid() != 0 or subprocess.call(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mount]) != 0:
        return [("full disk", "skipped: mounting a tmpfs needs root")]
    try:
        port = free_port()
        log = os.path.join(tempfile.mkdtemp(prefix="disklog-"), "daemon.log")
        proc = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir",
                                 os.path.join(mount, "data"), "--search", "off"],
                                stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                request(url + "/healthz")
                break
            except OSError:
                time.sleep(0.05)
        body = lambda n: {"name": n, "transport_type": "STDIO", "auto_connect": False,
                          "connection_config": {"command": "true", "env": {"PAD": "p" * 2000}}}
        acked = [f"a{n}" for n in range(5) if request(url + "/api/v1/aggregator/servers", body(f"a{n}"))[0] == 201]
        filler = os.path.join(mount, "filler")
        try:
            with open(filler, "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * 4096)
        except OSError:
            pass
        codes = [request(url + "/api/v1/aggregator/servers", body(f"f{n}"))[0] for n in range(3)]
        os.remove(filler)
        freed = time.time()
        n = 0
        while request(url + "/api/v1/aggregator/servers", body(f"r{n}"))[0] != 201:
            n += 1
            time.sleep(0.01)
        recovered = time.time() - freed
        names = [s["name"] for s in json.loads(request(url + "/api/v1/aggregator/servers")[1])]
        lost = [a for a in acked if a not in names]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        errors = sum(1 for line in open(log) if "ERROR" in line and "cannot be written" in line)
        return [("full disk: answers to writes while full", "/".join(map(str, codes))),
                ("full disk: space back to the first write accepted", f"{recovered * 1000:.0f} ms"),
                ("full disk: acknowledged writes lost / ERROR lines logged", f"{len(lost)} / {errors}")]
    finally:
        subprocess.call(["umount", "-l", mount])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "mcp-aggregator"))
    parser.add_argument("probes", nargs="*",
                        default=["lists", "classifier", "stderr", "crashloop", "redirect", "disk"])
    args = parser.parse_args()
    rows = []
    for name in args.probes:
        rows += globals()[f"probe_{name}"](args.binary)
    print("| figure | value |\n| --- | --- |")
    for figure, value in rows:
        print(f"| {figure} | {value} |")


if __name__ == "__main__":
    main()
