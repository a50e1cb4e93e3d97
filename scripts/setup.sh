#!/usr/bin/env bash
# Everything a fresh machine needs besides the Rust toolchain, Node and
# Python. Idempotent: re-running it only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is not on PATH; install Rust with rustup first" >&2
  exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Reference MCP servers the end-to-end tests talk to, pinned by the lock file.
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm is not on PATH; install Node.js 20 (the tests run reference servers from npm)" >&2
  exit 1
fi
# The official conformance runner (with the Node 22 it needs) beside them.
for dir in tests/npm tests/conformance; do
  stamp=$dir/node_modules/.installed-from-lock
  if ! cmp -s $dir/package-lock.json "$stamp" 2>/dev/null; then
    npm ci --prefix $dir --no-audit --no-fund --loglevel=error
    cp $dir/package-lock.json "$stamp"
  fi
done
# The official Python MCP SDK, an independent client for the interop tests.
if ! command -v python3 >/dev/null 2>&1; then
  echo "setup: python3 is not on PATH; install Python 3.11 (the interop tests use the Python MCP SDK)" >&2
  exit 1
fi
# Two virtualenvs: the 1.x SDK (and schemathesis), and the 2.x SDK that
# speaks both protocol eras.
for pair in ".venv:requirements.txt" ".venv-v2:requirements-v2.txt"; do
  venv=tests/${pair%%:*}
  requirements=tests/python/${pair##*:}
  venv_stamp=$venv/.installed-from-requirements
  if ! cmp -s "$requirements" "$venv_stamp" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv_stamp"
  fi
done
# Debian packages: PostgreSQL's server for the shared store's tests (they
# run their own, as a user who is not root, in a temporary directory);
# Chromium for the admin page's browser test; lintian,
# dpkg-dev (dpkg-shlibdeps), binutils (strip), man-db and systemd
# (systemd-analyze) for building and checking the .deb. Installed when
# missing, as root or through sudo; where neither is possible the checks
# that need them say so (CI needs them).
missing=()
command -v pg_ctl >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v lintian >/dev/null 2>&1 || missing+=(lintian)
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v strip >/dev/null 2>&1 || missing+=(binutils)
command -v man >/dev/null 2>&1 || missing+=(man-db)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get here; install ${missing[*]} yourself for the browser and packaging tests" >&2
  else
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
    echo "setup: installing ${missing[*]} (Debian packages)"
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
      && ! { "${sudo[@]}" apt-get update -q >/dev/null && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }; then
      if [ -n "${CI:-}" ]; then
        echo "setup: cannot install ${missing[*]}" >&2
        exit 1
      fi
      echo "setup: cannot install ${missing[*]} (not root, no sudo); the browser and packaging tests will say they were skipped" >&2
    fi
  fi
fi
# The search model and ONNX Runtime, embedded in the binary at build time.
./scripts/fetch-assets.sh
echo "setup: ok"
