"""Fuzzes the admin API with schemathesis against its own OpenAPI document:
no 5xx, and every response matches the document.

Runs inside a fresh network namespace (`unshare -n`, made by the caller):
the registrations schemathesis invents name random URLs, and nothing may
leave this machine. Commands it invents cannot run either: the daemon gets
an empty PATH.

usage: api_fuzz.py MCP_AGGREGATOR_BINARY SCHEMATHESIS_BINARY
"""

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def loopback_up():
    """A new namespace's loopback starts down."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    request = struct.pack("16sh", b"lo", 0)
    flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    sock.close()


def main():
    binary, schemathesis = sys.argv[1], sys.argv[2]
    loopback_up()
    with tempfile.TemporaryDirectory() as temp:
        data = os.path.join(temp, "data")
        empty_path = os.path.join(temp, "bin")
        os.mkdir(empty_path)
        log = open(os.path.join(temp, "daemon.log"), "w")
        env = {"PATH": empty_path, "HOME": temp, "RUST_LOG": "warn"}
        daemon = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", data,
             "--connect-timeout", "2", "--request-timeout", "5",
             # A replica's options (a shared store), when the test gives them.
             *json.loads(os.environ.get("FUZZ_SERVE_ARGS", "[]"))],
            env=env, cwd=temp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
        )
        try:
            url = None
            deadline = time.time() + 60
            while url is None:
                if daemon.poll() is not None:
                    sys.exit(f"the daemon exited early: {open(log.name).read()}")
                try:
                    with open(os.path.join(data, "daemon.json")) as f:
                        url = json.load(f)["url"]
                except (OSError, ValueError, KeyError):
                    if time.time() > deadline:
                        sys.exit("the daemon did not start")
                    time.sleep(0.05)
            run = subprocess.run(
                [schemathesis, "run", f"{url}/api/v1/openapi.json",
                 "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                 "--max-examples", os.environ.get("FUZZ_EXAMPLES", "25"),
                 "--workers", "1",
                 "--seed", os.environ.get("FUZZ_SEED", "20261126"),
                 "--request-timeout", "30",
                 "--max-time", os.environ.get("FUZZ_SECONDS", "100"),
                 "--suppress-health-check", "all",
                 "--warnings", "off",
                 "--no-color"],
                env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"},
                stdin=subprocess.DEVNULL,
                cwd=temp,  # its cache directory goes with the temp dir
            )
            alive = daemon.poll() is None
        finally:
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        if not alive:
            sys.exit(f"the daemon died under fuzzing: {open(log.name).read()[-4000:]}")
        panics = [l for l in open(log.name) if "panicked" in l]
        if panics:
            sys.exit(f"the daemon panicked: {panics[:5]}")
        sys.exit(run.returncode)


if __name__ == "__main__":
    main()
