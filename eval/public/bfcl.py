#!/usr/bin/env python3
"""Turns the Berkeley Function Calling Leaderboard's public data into tool
retrieval sets for `cargo run --release --example public_eval`.

Each BFCL question comes with the functions it may call and the calls that
answer it. A set pools every function of its files into one catalog (one
tool per distinct name) and asks each question against all of them: the
right tools are the functions of its answer, one intent each, so a
question answered by two functions is a compound request.

    python3 eval/public/bfcl.py [OUT_DIR]     (default target/public-eval)

The wheel (bfcl-eval 2026.3.23, Apache-2.0) comes from PyPI, pinned by
sha256; nothing of it is committed. Works offline once it is in OUT_DIR.
"""

import hashlib
import json
import os
import subprocess
import sys
import zipfile

WHEEL = "bfcl_eval-2026.3.23-py3-none-any.whl"
WHEEL_SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"

# set name -> the BFCL files it pools. "live" holds functions users sent
# in (real APIs, often terse); "synthetic" the hand-written categories.
SETS = {
    "bfcl-live": ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"],
    "bfcl-synthetic": ["simple_python", "multiple", "parallel", "parallel_multiple"],
}
SERVER = "api"


def fetch(out_dir):
    wheel = os.path.join(out_dir, WHEEL)
    if not os.path.exists(wheel):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
             "--dest", out_dir, "bfcl-eval==2026.3.23"],
            check=True,
        )
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    if digest != WHEEL_SHA256:
        sys.exit(f"{wheel}: sha256 {digest}, expected {WHEEL_SHA256}")
    return zipfile.ZipFile(wheel)


def lines(wheel, path):
    with wheel.open(path) as f:
        return [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]


def as_tool(function):
    schema = dict(function.get("parameters") or {})
    if schema.get("type") == "dict":
        schema["type"] = "object"
    return {
        "name": function["name"],
        "description": function.get("description", ""),
        "inputSchema": schema or {"type": "object"},
    }


def question_text(question):
    # The first turn; a system message there says how to answer, not what.
    turn = question[0] if question and isinstance(question[0], list) else question
    return " ".join(m["content"] for m in turn if m.get("role") == "user").strip()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "target/public-eval"
    os.makedirs(out_dir, exist_ok=True)
    wheel = fetch(out_dir)
    for name, files in SETS.items():
        tools = {}
        requests = []
        for file in files:
            questions = lines(wheel, f"bfcl_eval/data/BFCL_v4_{file}.json")
            answers = {
                a["id"]: a["ground_truth"]
                for a in lines(wheel, f"bfcl_eval/data/possible_answer/BFCL_v4_{file}.json")
            }
            for q in questions:
                for function in q["function"]:
                    tools.setdefault(function["name"], as_tool(function))
                wanted = []
                for call in answers.get(q["id"], []):
                    for function in call:
                        if function not in wanted:
                            wanted.append(function)
                text = question_text(q["question"])
                if wanted and text:
                    requests.append({
                        "query": text,
                        "intents": [[f"{SERVER}.{f}"] for f in wanted],
                        "split": file,
                    })
        missing = {i[0] for r in requests for i in r["intents"]} - {f"{SERVER}.{t}" for t in tools}
        if missing:
            sys.exit(f"{name}: answers name functions no question offers: {sorted(missing)[:5]}")
        set_dir = os.path.join(out_dir, name)
        os.makedirs(os.path.join(set_dir, "catalog"), exist_ok=True)
        with open(os.path.join(set_dir, "catalog", f"{SERVER}.json"), "w") as f:
            json.dump({"server": SERVER, "package": "bfcl-eval 2026.3.23 (Apache-2.0)",
                       "tools": list(tools.values())}, f)
        with open(os.path.join(set_dir, "requests.jsonl"), "w") as f:
            for r in requests:
                f.write(json.dumps(r) + "\n")
        compound = sum(len(r["intents"]) > 1 for r in requests)
        print(f"{set_dir}: {len(tools)} tools, {len(requests)} requests ({compound} compound)")


if __name__ == "__main__":
    main()
