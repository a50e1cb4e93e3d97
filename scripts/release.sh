#!/usr/bin/env bash
# Makes the release artifacts in dist/:
#   mcp-aggregator-VERSION-ARCH-linux.tar.gz   binary, man pages, completions,
#       README.md, the systemd unit, examples/servers.json, install.sh and
#       uninstall.sh: `tar xf …; cd mcp-aggregator-VERSION-ARCH-linux;
#       ./install.sh` installs it offline
#   mcp-aggregator_VERSION-1_ARCH.deb          (packaging/build-deb.sh)
#   SHA256SUMS                                 of both
set -euo pipefail

prog=release.sh
usage() {
  cat <<'EOF'
Usage: scripts/release.sh [--binary PATH] [--out DIR]

Builds the release binary (cargo build --release --locked --features postgres), then writes
into OUT (default: dist/) the tarball mcp-aggregator-VERSION-ARCH-linux.tar.gz,
the .deb and SHA256SUMS.

  --binary PATH   use this binary instead of building one
  --out DIR       where the artifacts go (default: dist/)
  -h, --help      show this help

ARCH is Debian's name for this machine (amd64, arm64), as in the .deb.
SOURCE_DATE_EPOCH (default: the last commit's time) dates every file, so
the same binary gives the same artifacts.
Exit status: 0 done, 1 failed, 2 bad usage.
EOF
}
die() {
  echo "$prog: $*" >&2
  exit 1
}
usage_error() {
  echo "$prog: $*" >&2
  echo "Try '$prog --help'." >&2
  exit 2
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=
out=$repo/dist
while (($#)); do
  case $1 in
    --binary | --out)
      if (($# < 2)) || [[ -z $2 ]]; then usage_error "$1 needs a value"; fi
      if [[ $1 == --binary ]]; then binary=$2; else out=$2; fi
      shift 2
      ;;
    --binary=*)
      binary=${1#*=}
      [[ -n $binary ]] || usage_error "--binary needs a value"
      shift
      ;;
    --out=*)
      out=${1#*=}
      [[ -n $out ]] || usage_error "--out needs a value"
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) usage_error "unknown argument: $1" ;;
  esac
done

for tool in tar gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done

version=$(awk '
  /^\[/ { in_package = ($0 == "[package]") }
  in_package && /^version[[:space:]]*=/ { gsub(/.*=[[:space:]]*"|".*/, ""); print; exit }
' "$repo/Cargo.toml")
[[ -n $version ]] || die "no version in $repo/Cargo.toml"
if command -v dpkg >/dev/null 2>&1; then
  arch=$(dpkg --print-architecture)
else
  case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    armv7l) arch=armhf ;;
    *) arch=$(uname -m) ;;
  esac
fi

if [[ -n $binary ]]; then
  [[ $binary == /* ]] || binary=$PWD/$binary
  [[ -f $binary && -x $binary ]] || usage_error "--binary $binary: not an executable file"
else
  command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH: give --binary PATH"
  echo "$prog: building the release binary (cargo build --release --locked --features postgres)"
  (cd "$repo" && cargo build --release --locked --features postgres)
  target_dir=${CARGO_TARGET_DIR:-target}
  [[ $target_dir == /* ]] || target_dir=$repo/$target_dir
  binary=$target_dir/release/mcp-aggregator
fi
said=$("$binary" --version) || die "$binary does not run"
[[ $said == "mcp-aggregator $version" ]] ||
  die "$binary says '$said', Cargo.toml says $version: rebuild it (or give the right one)"

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mcp-aggregator-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
umask 022

name=mcp-aggregator-$version-$arch-linux
dir=$work/$name
mkdir -p "$dir/man" "$dir/completions" "$dir/examples"
install -m 755 "$binary" "$dir/mcp-aggregator"
# Debug info out (a debug build's is most of its size); symbols stay, as
# in the release profile, for readable backtraces.
if command -v strip >/dev/null 2>&1; then
  strip --strip-debug "$dir/mcp-aggregator"
fi
"$binary" man --dir "$dir/man" >/dev/null || die "$binary cannot write its man pages"
"$binary" completions bash >"$dir/completions/mcp-aggregator.bash"
"$binary" completions zsh >"$dir/completions/_mcp-aggregator"
"$binary" completions fish >"$dir/completions/mcp-aggregator.fish"
install -m 644 "$repo/README.md" "$dir/README.md"
install -m 644 "$repo/packaging/mcp-aggregator.service" "$dir/mcp-aggregator.service"
install -m 644 "$repo/examples/servers.json" "$dir/examples/servers.json"
install -m 755 "$repo/scripts/install.sh" "$repo/scripts/uninstall.sh" "$dir/"
chmod 644 "$dir"/man/* "$dir"/completions/*

tarball=$out/$name.tar.gz
find "$dir" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime="@$SOURCE_DATE_EPOCH" -cf - "$name" | gzip -9n >"$tarball.tmp"
mv -f "$tarball.tmp" "$tarball"
echo "$prog: wrote $tarball"

deb=$("$repo/packaging/build-deb.sh" --binary "$binary" --out "$out")
echo "$prog: wrote $deb"

(cd "$out" && sha256sum -- "${tarball##*/}" "${deb##*/}" >SHA256SUMS)
echo "$prog: wrote $out/SHA256SUMS:"
sed 's/^/  /' "$out/SHA256SUMS"
