#!/usr/bin/env bash
# Runs the whole test suite (unit and end-to-end) after the set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo test --all-targets --features fixture "$@"
