#!/usr/bin/env python3
"""Turns StableToolBench's solvable test queries (ToolBench's G1/G2/G3
instructions over RapidAPI tools) into a tool retrieval set for
`cargo run --release --example public_eval`.

Each query comes with the APIs it may call (`api_list`) and the ones that
answer it (`relevant APIs`, mostly two to five: compound requests). The set
pools every API of every query into one catalog, a server per RapidAPI tool
and a tool per API, and asks each query against all of them; the right
tools are its relevant APIs, one intent each.

    python3 eval/public/toolbench.py CHECKOUT [OUT_DIR]

CHECKOUT is a clone of https://github.com/THUNLP-MT/StableToolBench
(Apache-2.0; the files read are `solvable_queries/test_instruction/*.json`).
OUT_DIR defaults to target/public-eval. Nothing of it is committed.
"""

import json
import os
import re
import sys

FILES = ["G1_instruction", "G1_category", "G1_tool", "G2_instruction", "G2_category",
         "G3_instruction"]
SET = "toolbench"


def name(text, fallback):
    """A server or tool name our registry takes: ToolBench's own
    standardisation (lower case, runs of other characters to `_`)."""
    cleaned = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"{fallback}_{cleaned}".strip("_")
    return cleaned[:64]


def as_tool(api, tool_name):
    properties = {}
    for p in api.get("required_parameters", []) + api.get("optional_parameters", []):
        kind = {"NUMBER": "number", "BOOLEAN": "boolean"}.get(str(p.get("type")).upper(), "string")
        properties[p["name"]] = {"type": kind, "description": p.get("description", "")}
    return {
        "name": tool_name,
        "description": (api.get("api_description") or "").strip(),
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": [p["name"] for p in api.get("required_parameters", [])],
        },
    }


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    checkout = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "target/public-eval"
    servers = {}  # server name -> {tool name -> tool}
    ids = {}  # (tool_name, api_name) -> "server.tool"
    requests = []
    for file in FILES:
        path = os.path.join(checkout, "solvable_queries", "test_instruction", f"{file}.json")
        for q in json.load(open(path)):
            for api in q["api_list"]:
                key = (api["tool_name"], api["api_name"])
                if key in ids:
                    continue
                server = name(api["tool_name"], "api")
                tools = servers.setdefault(server, {})
                tool = name(api["api_name"], "call")
                base, n = tool, 2
                while tool in tools:  # two APIs whose names standardise alike
                    tool, n = f"{base}_{n}", n + 1
                tools[tool] = as_tool(api, tool)
                ids[key] = f"{server}.{tool}"
            wanted = []
            for tool_name, api_name in q["relevant APIs"]:
                tool_id = ids.get((tool_name, api_name))
                if tool_id and tool_id not in wanted:
                    wanted.append(tool_id)
            if wanted and q["query"].strip():
                requests.append({"query": q["query"].strip(),
                                 "intents": [[t] for t in wanted], "split": file})
    set_dir = os.path.join(out_dir, SET)
    catalog = os.path.join(set_dir, "catalog")
    os.makedirs(catalog, exist_ok=True)
    for old in os.listdir(catalog):
        os.remove(os.path.join(catalog, old))
    for server, tools in servers.items():
        with open(os.path.join(catalog, f"{server}.json"), "w") as f:
            json.dump({"server": server, "package": "StableToolBench (Apache-2.0)",
                       "tools": list(tools.values())}, f)
    with open(os.path.join(set_dir, "requests.jsonl"), "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
    compound = sum(len(r["intents"]) > 1 for r in requests)
    print(f"{set_dir}: {len(ids)} tools on {len(servers)} servers, "
          f"{len(requests)} requests ({compound} compound)")


if __name__ == "__main__":
    main()
