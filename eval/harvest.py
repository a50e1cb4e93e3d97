#!/usr/bin/env python3
"""Records the real `tools/list` of the MCP servers in eval/servers.json.

Each server is installed from its registry (npm or PyPI) into a scratch
directory, started over stdio with placeholder credentials (servers list
their tools without calling their APIs), and its tool definitions are
written, unchanged, to eval/catalog/<name>.json (or the server's "dir":
eval/catalog-skills/ holds servers only the skill evaluation reads) with
the package's version and licence. The catalog is committed; this script only needs to run again
to refresh it.

    python3 -m venv /tmp/harvest-venv && /tmp/harvest-venv/bin/pip install mcp==1.27.0
    /tmp/harvest-venv/bin/python eval/harvest.py --npm-dir /tmp/harvest --py-dir /tmp/harvest/py/venv
"""

import argparse
import asyncio
import json
import os
import pathlib
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parent


def npm_package(npm_dir: pathlib.Path, package: str) -> dict:
    return json.loads((npm_dir / "node_modules" / package / "package.json").read_text())


def npm_command(npm_dir: pathlib.Path, package: str, binary: str | None) -> list[str]:
    meta = npm_package(npm_dir, package)
    bins = meta.get("bin")
    if isinstance(bins, str):
        script = bins
    elif isinstance(bins, dict) and bins:
        script = bins[binary] if binary else next(iter(bins.values()))
    else:
        raise RuntimeError(f"{package} has no bin")
    return ["node", str(npm_dir / "node_modules" / package / script)]


def pypi_version(py_dir: pathlib.Path, package: str) -> tuple[str, str]:
    import importlib.metadata as md

    site = next((py_dir / "lib").glob("python3*/site-packages"))
    for dist in md.distributions(path=[str(site)]):
        if dist.metadata["Name"].lower().replace("_", "-") == package.lower():
            licence = dist.metadata.get("License-Expression") or dist.metadata.get("License") or ""
            if not licence or len(licence) > 40:
                classifiers = [c for c in dist.metadata.get_all("Classifier") or [] if c.startswith("License ::")]
                licence = classifiers[0].split("::")[-1].strip() if classifiers else licence[:40]
            return dist.version, licence
    raise RuntimeError(f"{package} is not installed in {py_dir}")


async def list_tools(command: list[str], env: dict, cwd: str) -> list[dict]:
    params = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **env}, cwd=cwd)
    async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools, cursor = [], None
            while True:
                page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
                tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
                cursor = page.nextCursor
                if not cursor:
                    return tools


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--npm-dir", type=pathlib.Path, required=True)
    parser.add_argument("--py-dir", type=pathlib.Path, required=True)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    servers = json.loads((ROOT / "servers.json").read_text())["servers"]
    failures = 0
    for server in servers:
        name = server["name"]
        if args.only and name not in args.only:
            continue
        try:
            if server["registry"] == "npm":
                meta = npm_package(args.npm_dir, server["package"])
                version, licence = meta["version"], meta.get("license", "")
                command = npm_command(args.npm_dir, server["package"], server.get("bin"))
            else:
                version, licence = pypi_version(args.py_dir, server["package"])
                command = [str(args.py_dir / "bin" / server["bin"])]
            command += server.get("args", [])
            tools = await asyncio.wait_for(list_tools(command, server.get("env", {}), "/tmp"), 90)
        except Exception as err:  # noqa: BLE001 - report and go on with the next server
            failures += 1
            print(f"{name}: FAILED {type(err).__name__}: {err}", file=sys.stderr)
            continue
        record = {
            "server": name,
            "registry": server["registry"],
            "package": server["package"],
            "version": version,
            "license": licence,
            "tools": tools,
        }
        out = ROOT / server.get("dir", "catalog")
        out.mkdir(exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {len(tools)} tools ({server['package']} {version}, {licence})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
