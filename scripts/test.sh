#!/usr/bin/env bash
# Runs the whole test suite (unit and end-to-end) after the set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Every test binary runs even when one fails, so one failure hides no other.
cargo test --all-targets --features fixture,postgres --no-fail-fast "$@"
