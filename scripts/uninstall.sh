#!/usr/bin/env bash
# Removes what scripts/install.sh installed, exactly: the files listed in
# PREFIX/share/mcp-aggregator/install-manifest, then the directories it made
# that are empty now. The config and the data dir stay unless --purge.
# install.sh also copies this script to PREFIX/share/mcp-aggregator/.
set -euo pipefail

prog=uninstall.sh
manifest_header='# mcp-aggregator install manifest'

usage() {
  cat <<'EOF'
Usage: uninstall.sh [--prefix DIR] [--purge [--yes]]

Removes the mcp-aggregator that install.sh installed under a prefix: the
files listed in PREFIX/share/mcp-aggregator/install-manifest and the
directories it created that are empty now. Your config and data are kept.

Options:
  --prefix DIR   where it was installed (default: ~/.local, or /usr/local as root)
  --purge        also delete the config dir ${XDG_CONFIG_HOME:-~/.config}/mcp-aggregator
                 and the data dir ${XDG_DATA_HOME:-~/.local/share}/mcp-aggregator
                 (registered servers, their secrets, the audit log), after asking
  -y, --yes      with --purge: do not ask
  -h, --help     show this help

Exit status: 0 removed, 1 failed (or nothing installed there), 2 bad usage.
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

prefix=
purge=0
yes=0
while (($#)); do
  case $1 in
    --prefix)
      (($# >= 2)) || usage_error "--prefix needs a value"
      [[ -n $2 ]] || usage_error "--prefix needs a non-empty value"
      prefix=$2
      shift 2
      ;;
    --prefix=*)
      prefix=${1#*=}
      [[ -n $prefix ]] || usage_error "--prefix needs a non-empty value"
      shift
      ;;
    --purge)
      purge=1
      shift
      ;;
    -y | --yes)
      yes=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) usage_error "unknown argument: $1" ;;
  esac
done
((!yes || purge)) || usage_error "--yes only goes with --purge"

if [[ -z $prefix ]]; then
  if ((EUID == 0)); then
    prefix=/usr/local
  else
    [[ -n ${HOME:-} ]] || die "HOME is not set; give --prefix"
    prefix=$HOME/.local
  fi
fi
[[ $prefix == /* ]] || prefix=$PWD/$prefix
prefix=${prefix%/}
[[ -n $prefix ]] || usage_error "--prefix / is not supported"

# What --purge deletes, decided (and asked about) before anything is removed.
purge_dirs=()
if ((purge)); then
  config_dir=${XDG_CONFIG_HOME:-${HOME:?HOME is not set}/.config}/mcp-aggregator
  data_dir=${XDG_DATA_HOME:-$HOME/.local/share}/mcp-aggregator
  for dir in "$config_dir" "$data_dir"; do
    if [[ -e $dir || -L $dir ]]; then purge_dirs+=("$dir"); fi
  done
  # A daemon still using the data dir would go on writing into a deleted
  # directory: stop it first.
  if [[ -f $data_dir/daemon.json ]]; then
    pid=$(grep -o '"pid"[[:space:]]*:[[:space:]]*[0-9]*' "$data_dir/daemon.json" | grep -o '[0-9]*$' || true)
    if [[ -n $pid && -d /proc/$pid ]]; then
      die "a daemon (pid $pid) is using $data_dir: stop it first (kill $pid), then run this again"
    fi
  fi
  if ((${#purge_dirs[@]})) && ((!yes)); then
    [[ -t 0 ]] || usage_error "--purge deletes your config and data: run it in a terminal to confirm, or add --yes"
    echo "$prog: --purge deletes, with everything in them:"
    printf '  %s\n' "${purge_dirs[@]}"
    read -r -p "Delete them? [y/N] " answer
    case $answer in
      [yY] | [yY][eE][sS]) ;;
      *)
        echo "$prog: nothing removed" >&2
        exit 1
        ;;
    esac
  fi
fi

manifest=$prefix/share/mcp-aggregator/install-manifest
if [[ -f $manifest ]]; then
  IFS= read -r first <"$manifest" || first=
  [[ $first == "$manifest_header"* ]] || die "$manifest is not an install manifest of mcp-aggregator; nothing removed"
  files=()
  dirs=()
  while IFS= read -r line; do
    case $line in
      'f '*) files+=("${line#f }") ;;
      'd '*) dirs+=("${line#d }") ;;
    esac
  done <"$manifest"

  removed=0
  for file in "${files[@]}"; do
    # Only what lies under the prefix, whatever the manifest says.
    if [[ $file != "$prefix"/* || $file == *'/../'* ]]; then
      echo "$prog: skipped $file (outside $prefix)" >&2
      continue
    fi
    if [[ -f $file || -L $file ]]; then
      rm -f -- "$file"
      removed=$((removed + 1))
    fi
  done
  rm -f -- "$manifest"
  # Deepest first, and only when empty: a directory that holds anything
  # else (another program's completions, pages) stays.
  if ((${#dirs[@]})); then
    while IFS= read -r dir; do
      if [[ $dir == "$prefix"/* || $dir == "$prefix" ]]; then rmdir -- "$dir" 2>/dev/null || true; fi
    done < <(printf '%s\n' "${dirs[@]}" | awk '{ print gsub("/", "/"), $0 }' | sort -rn | cut -d' ' -f2-)
  fi
  echo "$prog: removed $removed files of mcp-aggregator from $prefix"
  if ((!purge)); then
    echo "$prog: kept your config (${XDG_CONFIG_HOME:-~/.config}/mcp-aggregator) and data (${XDG_DATA_HOME:-~/.local/share}/mcp-aggregator); --purge deletes them"
  fi
elif ((purge)); then
  echo "$prog: nothing installed under $prefix (no $manifest); purging config and data only"
else
  die "nothing installed under $prefix (no $manifest); give the --prefix it was installed with"
fi

if ((purge)); then
  if ((${#purge_dirs[@]})); then
    for dir in "${purge_dirs[@]}"; do
      rm -rf -- "$dir"
      echo "$prog: deleted $dir"
    done
  else
    echo "$prog: no config or data dir to delete"
  fi
fi
