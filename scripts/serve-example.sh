#!/usr/bin/env bash
# Builds the release binary and serves the example config on 127.0.0.1:8765,
# with a data dir under target/ so a first try leaves nothing elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
# Serving needs only the build and the model assets it embeds (the test
# servers, the conformance runner and the Python SDKs are for tests).
if ! command -v cargo >/dev/null 2>&1; then
  echo "serve-example: cargo is not on PATH; install Rust with rustup first" >&2
  exit 1
fi
./scripts/fetch-assets.sh
cargo build --release
export MCP_AGGREGATOR_DATA_DIR="${MCP_AGGREGATOR_DATA_DIR:-$PWD/target/example-data}"
echo "serving examples/servers.json; data dir $MCP_AGGREGATOR_DATA_DIR; try: curl http://127.0.0.1:8765/api/v1/aggregator/servers"
exec ./target/release/mcp-aggregator serve --config examples/servers.json "$@"
