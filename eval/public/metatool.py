#!/usr/bin/env python3
"""Turns MetaTool's tool-selection data (ChatGPT plugins and the queries
written for them) into a tool retrieval set for `cargo run --release
--example public_eval`.

MetaTool (Huang et al., ICLR 2024) asks which of 199 plugins a request
needs: 20,614 requests want one plugin, 497 want two at once. The
plugins' descriptions are a line of store copy ("Stay informed with the
latest financial updates…"), with no parameters, and the requests were
written by a model in several styles (direct, emotional, by keyword, with
details), so they rarely share the description's words: a paraphrase-heavy
set, unlike BFCL and ToolBench. The catalog is one server, `plugins`, with
a tool per plugin; the requests are every tenth one-plugin request (the
file is grouped by plugin, so each keeps its share) and every two-plugin
request.

    python3 eval/public/metatool.py CHECKOUT [OUT_DIR]

CHECKOUT is a clone of https://github.com/HowieHwong/MetaTool (MIT; the
files read are `dataset/plugin_des.json`, `dataset/data/all_clean_data.csv`
and `dataset/data/multi_tool_query_golden.json`). OUT_DIR defaults to
target/public-eval. Nothing of it is committed.
"""

import csv
import json
import os
import re
import sys

SET = "metatool"
SERVER = "plugins"
EVERY = 10  # one-plugin requests kept: every tenth, in file order


def name(text):
    """A tool name our registry takes: runs of other characters to `_`."""
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"plugin_{cleaned}".strip("_")
    return cleaned[:64]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    checkout = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "target/public-eval"
    data = os.path.join(checkout, "dataset")
    plugins = json.load(open(os.path.join(data, "plugin_des.json")))
    names = {plugin: name(plugin) for plugin in plugins}
    if len(set(names.values())) != len(names):
        sys.exit("two plugins standardise to one tool name")
    tools = [{"name": names[p], "description": d.strip(),
              "inputSchema": {"type": "object", "properties": {}}} for p, d in plugins.items()]
    requests = []
    with open(os.path.join(data, "data", "all_clean_data.csv"), newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            if i % EVERY == 0 and row["Query"].strip():
                requests.append({"query": row["Query"].strip(),
                                 "intents": [[f"{SERVER}.{names[row['Tool']]}"]],
                                 "split": "single"})
    for q in json.load(open(os.path.join(data, "data", "multi_tool_query_golden.json"))):
        wanted = list(dict.fromkeys(f"{SERVER}.{names[t]}" for t in q["tool"]))
        requests.append({"query": q["query"].strip(), "intents": [[t] for t in wanted],
                         "split": "multi"})
    set_dir = os.path.join(out_dir, SET)
    catalog = os.path.join(set_dir, "catalog")
    os.makedirs(catalog, exist_ok=True)
    for old in os.listdir(catalog):
        os.remove(os.path.join(catalog, old))
    with open(os.path.join(catalog, f"{SERVER}.json"), "w") as f:
        json.dump({"server": SERVER, "package": "MetaTool (MIT)", "tools": tools}, f)
    with open(os.path.join(set_dir, "requests.jsonl"), "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
    compound = sum(len(r["intents"]) > 1 for r in requests)
    print(f"{set_dir}: {len(tools)} tools, {len(requests)} requests ({compound} compound)")


if __name__ == "__main__":
    main()
