#!/usr/bin/env bash
# Everything a fresh machine needs besides the Rust toolchain. Idempotent:
# re-running it only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is not on PATH; install Rust with rustup first" >&2
  exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy >/dev/null 2>&1 || true
echo "setup: ok"
