#!/usr/bin/env bash
# The checks CI runs on the Debian package:
#   1. the unit's sandbox: `systemd-analyze security --offline=true` rates
#      its exposure at most 2.0
#   2. the unit as packaged: `systemd-analyze verify` says nothing
#   3. lintian: no errors (--fail-on error); the copyright lists the crates
#   4. a real install on this machine (root): dpkg -i, the binary, man page,
#      completions and conffile there; data stored; the same package again as
#      an upgrade (data kept, the user's edit of the conffile kept); dpkg -r
#      (data kept); dpkg --purge (data, /etc dir and binary gone).
# A part whose tool is missing is skipped with a message, except under CI
# (CI set), where a missing dpkg-deb, systemd-analyze or lintian fails. The
# machine is left as it was found: the package is purged at the end, also
# on failure, and what systemd would have made is removed.
set -euo pipefail

prog=check.sh
usage() {
  cat <<'EOF'
Usage: packaging/check.sh [--no-install] [DEB]

Checks the mcp-aggregator .deb DEB (default: one built now by
packaging/build-deb.sh, which builds the release binary).

  --no-install   skip the install exercise (it needs root and a machine
                 without mcp-aggregator installed)
  -h, --help     show this help

Exit status: 0 every check passed (or was skipped), 1 a check failed,
2 bad usage.
EOF
}
usage_error() {
  echo "$prog: $*" >&2
  echo "Try '$prog --help'." >&2
  exit 2
}

install_exercise=1
deb=
while (($#)); do
  case $1 in
    --no-install)
      install_exercise=0
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*) usage_error "unknown option: $1" ;;
    *)
      [[ -z $deb ]] || usage_error "one DEB only"
      deb=$1
      shift
      ;;
  esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
package=mcp-aggregator
unit=$package.service
max_exposure=2.0
failures=0
skipped=()

say() { echo "$prog: $*"; }
pass() { echo "  ok    $*"; }
fail() {
  echo "  FAIL  $*" >&2
  failures=$((failures + 1))
}
# A missing tool skips its part, or fails it under CI.
missing() { # missing TOOL WHAT
  if [[ -n ${CI:-} ]]; then
    fail "$1 is not installed, so $2 cannot run (required under CI)"
  else
    say "SKIPPED $2: $1 is not installed"
    skipped+=("$2 ($1 missing)")
  fi
}
have() { command -v "$1" >/dev/null 2>&1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mcp-aggregator-check.XXXXXX")
cleanup_install=:
cleanup() {
  local status=$?
  "$cleanup_install"
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -z $deb ]]; then
  have dpkg-deb || { missing dpkg-deb "building the package"; exit $((failures > 0)); }
  say "no DEB given: building one (packaging/build-deb.sh --out $work/out)"
  deb=$("$repo/packaging/build-deb.sh" --out "$work/out")
fi
[[ -f $deb ]] || usage_error "$deb: no such file"
deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
say "checking $deb"

root=$work/root
if have dpkg-deb; then
  dpkg-deb -x "$deb" "$root"
  deb_version=$(dpkg-deb -f "$deb" Version)
else
  missing dpkg-deb "unpacking the package"
  exit $((failures > 0))
fi
unit_file=$root/usr/lib/systemd/system/$unit
[[ -f $unit_file ]] || {
  fail "the package has no /usr/lib/systemd/system/$unit"
  exit 1
}

# 1. The sandbox's exposure, as systemd rates it (0 best, 10 worst).
say "1. systemd-analyze security --offline=true (at most $max_exposure)"
if have systemd-analyze; then
  if report=$(systemd-analyze security --offline=true --no-pager "$unit_file" 2>&1); then
    exposure=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p' <<<"$report")
    if [[ -z $exposure ]]; then
      fail "no exposure level in the report:"$'\n'"$report"
    elif awk -v e="$exposure" -v max="$max_exposure" 'BEGIN { exit !(e <= max) }'; then
      pass "overall exposure $exposure (at most $max_exposure)"
    else
      echo "$report" | grep -E '^✗' >&2 || true
      fail "overall exposure $exposure is above $max_exposure (the ✗ lines above say what is missing)"
    fi
  else
    fail "systemd-analyze security failed (systemd older than 250?):"$'\n'"$report"
  fi
else
  missing systemd-analyze "the unit's security rating"
fi

# 2. The unit as packaged, in a root made of the package and this machine's
# own units (for the targets it refers to): verify must say nothing.
say "2. systemd-analyze verify (the unit as packaged)"
if have systemd-analyze; then
  for dir in /usr/lib/systemd/system /lib/systemd/system; do
    if [[ -d $dir && ! -L $dir ]]; then cp -an "$dir/." "$root/usr/lib/systemd/system/"; fi
  done
  # Its man pages are checked after installing (verify looks them up with man).
  if output=$(systemd-analyze verify --root="$root" --man=no "$unit" 2>&1) && [[ -z $output ]]; then
    pass "verify is clean"
  else
    fail "systemd-analyze verify:"$'\n'"${output:-(no output, but it failed)}"
  fi
else
  missing systemd-analyze "verifying the unit"
fi

# 3. lintian.
say "3. lintian --fail-on error"
if have lintian; then
  lintian_args=(--fail-on error --display-info)
  if output=$(lintian "${lintian_args[@]}" "$deb" 2>&1); then lintian_ok=1; else lintian_ok=0; fi
  summary=$(awk '/^[EWIPX]: / { n[substr($0, 1, 1)]++ }
    END { printf "%d errors, %d warnings, %d info, %d pedantic", n["E"], n["W"], n["I"], n["P"] }' <<<"$output")
  if ((lintian_ok)) && ! grep -q '^E: ' <<<"$output"; then
    grep -E '^[EW]: ' <<<"$output" || true
    pass "lintian: $summary (overridden tags: packaging/debian/lintian-overrides)"
  else
    echo "$output" >&2
    fail "lintian: $summary"
  fi
else
  missing lintian "lintian"
fi
# The copyright file names each crate linked in (build-deb.sh lists them
# from cargo metadata; a fallback line would only point at Cargo.lock).
copyright=$root/usr/share/doc/$package/copyright
if [[ -f $copyright ]] && grep -qE '^  redb [0-9]' "$copyright" && grep -qE '^  tantivy [0-9]' "$copyright"; then
  pass "copyright lists the crates ($(grep -cE '^  [A-Za-z0-9_-]+ [0-9][^:]*: ' "$copyright") of them)"
else
  fail "the copyright file does not list the crates linked in (see build-deb.sh's warning)"
fi

# 4. A real install, upgrade, removal and purge.
say "4. install exercise: dpkg -i, upgrade, dpkg -r, dpkg --purge"
if ((!install_exercise)); then
  say "SKIPPED the install exercise (--no-install)"
  skipped+=("install exercise (--no-install)")
elif ! have dpkg; then
  missing dpkg "the install exercise"
elif ((EUID != 0)); then
  fail "the install exercise needs root (run it with sudo, or pass --no-install)"
else
  status_of() { dpkg-query -W -f='${Status}' "$package" 2>/dev/null || echo "not-installed"; }
  # Where the package, the service and systemd's bookkeeping put things.
  runtime_paths=("/etc/$package" "/var/lib/$package" "/var/lib/private/$package"
    "/var/cache/$package" "/var/cache/private/$package")
  watched=(/etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled
    /var/lib/systemd/deb-systemd-helper-masked /var/lib/private /var/cache/private
    "${runtime_paths[@]}")
  while IFS= read -r path; do watched+=("$path"); done < <(dpkg-deb -c "$deb" | awk '{ sub(/^\./, "", $6); if ($6 != "/") print $6 }' | grep -v '/$' || true)
  snapshot() { find "${watched[@]}" -maxdepth 3 -printf '%p %y %l\n' 2>/dev/null | LC_ALL=C sort || true; }

  clean=1
  case $(status_of) in
    *not-installed) ;;
    *)
      fail "$package is already installed here ($(status_of)): the exercise would purge it; run it on a machine without it"
      clean=0
      ;;
  esac
  for path in "${runtime_paths[@]}"; do
    if [[ -e $path || -L $path ]]; then
      fail "$path exists already: the exercise's purge would delete it; run it on a clean machine"
      clean=0
    fi
  done
  if ((clean)); then
    before=$(snapshot)
    systemd_up=0
    [[ -d /run/systemd/system ]] && systemd_up=1
    log=$work/dpkg.log
    daemon_pid=
    made=()
    bin=/usr/bin/$package
    data=/var/lib/$package
    config=/etc/$package/servers.json

    stop_daemon() {
      if [[ -n $daemon_pid ]]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=
      fi
    }
    undo_install() {
      stop_daemon
      case $(status_of) in
        *not-installed) ;;
        *) dpkg --purge "$package" >>"$log" 2>&1 || echo "$prog: could not purge $package (see dpkg --purge $package)" >&2 ;;
      esac
      local dir
      for dir in "${made[@]}"; do rmdir "$dir" 2>/dev/null || true; done
      local after
      after=$(snapshot)
      if [[ $after != "$before" ]]; then
        echo "$prog: FAIL the machine is not as it was; what changed (< before, > after):" >&2
        diff <(echo "$before") <(echo "$after") >&2 || true
        exit 1
      fi
    }
    cleanup_install=undo_install

    dpkg_run() { # dpkg_run ARGS…: dpkg, its output kept for a failure
      if ! dpkg "$@" </dev/null >"$log" 2>&1; then
        cat "$log" >&2
        fail "dpkg $*"
        exit 1
      fi
    }
    # The daemon holding the data dir: the service where systemd runs,
    # else one started here as the unit would (root stands in for the
    # dynamic user; the dirs are laid out as StateDirectory= and
    # CacheDirectory= make them with DynamicUser=).
    start_daemon() {
      if ((systemd_up)); then
        for _ in $(seq 60); do
          systemctl is-active --quiet "$unit" && break
          sleep 0.5
        done
        systemctl is-active --quiet "$unit" || {
          journalctl -u "$unit" -n 50 --no-pager >&2 || true
          fail "$unit is not active"
          exit 1
        }
      else
        local base
        for base in /var/lib /var/cache; do
          if [[ ! -d $base/private ]]; then
            mkdir -m 700 "$base/private"
            made+=("$base/private")
          fi
          [[ -d $base/private/$package ]] || mkdir -m 700 "$base/private/$package"
          [[ -L $base/$package ]] || ln -s "private/$package" "$base/$package"
        done
        HOME=/var/cache/$package MCP_AGGREGATOR_DATA_DIR=$data MCP_AGGREGATOR_LISTEN=127.0.0.1:0 \
          MCP_AGGREGATOR_SEARCH=off "$bin" serve --log-format json --config "$config" \
          >>"$work/daemon.log" 2>&1 &
        daemon_pid=$!
      fi
      for _ in $(seq 60); do
        # daemon.json first: without it the CLI would ask 127.0.0.1:8765,
        # where another daemon may answer.
        if [[ -f $data/daemon.json ]] && "$bin" state --data-dir "$data" >/dev/null 2>&1; then return 0; fi
        if [[ -n $daemon_pid ]] && ! kill -0 "$daemon_pid" 2>/dev/null; then break; fi
        sleep 0.5
      done
      cat "$work/daemon.log" >&2 2>/dev/null || true
      fail "the daemon did not answer on $data"
      exit 1
    }
    expect_servers() { # expect_servers NAME…: the daemon lists each (a
      # running daemon applies an edit of its config file within seconds)
      local listed name missing_names
      for _ in $(seq 40); do
        listed=$("$bin" servers list --data-dir "$data" --json) || {
          fail "servers list"
          exit 1
        }
        missing_names=()
        for name in "$@"; do
          grep -q "\"name\": *\"$name\"" <<<"$listed" || missing_names+=("$name")
        done
        ((${#missing_names[@]})) || break
        sleep 0.5
      done
      for name in "$@"; do
        if grep -q "\"name\": *\"$name\"" <<<"$listed"; then
          pass "the daemon has $name"
        else
          fail "the daemon does not list $name: $listed"
        fi
      done
    }

    say "  dpkg -i (systemd running: $( ((systemd_up)) && echo yes || echo no))"
    dpkg_run -i "$deb"
    upstream=${deb_version%-*}
    said=$("$bin" --version 2>&1) || true
    if [[ $said == "$package ${upstream//\~/-}" ]]; then pass "$bin --version: $said"; else fail "$bin --version said: $said"; fi
    if grep -rqs '^path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg.d/; then
      say "  (dpkg is told to leave out man pages here: checked in the package only)"
      if dpkg-deb -c "$deb" | grep -q "usr/share/man/man1/$package.1.gz"; then pass "man page in the package"; else fail "no man page in the package"; fi
      man_check=no
    elif [[ -f /usr/share/man/man1/$package.1.gz ]] && gzip -t "/usr/share/man/man1/$package.1.gz"; then
      man_check=no
      if have man; then
        if man -w "$package" >/dev/null 2>&1 && man "$package" 2>/dev/null | grep -q 'serve'; then
          pass "man $package ($(man -w "$package"))"
          man_check=yes
        else
          fail "man $package does not find it"
        fi
      else
        pass "man page /usr/share/man/man1/$package.1.gz (man is not installed to open it)"
      fi
    else
      fail "no man page /usr/share/man/man1/$package.1.gz"
      man_check=no
    fi
    completion=/usr/share/bash-completion/completions/$package
    if bash -c "source '$completion' && complete -p $package" >/dev/null 2>&1; then pass "bash completion ($completion)"; else fail "bash completion $completion does not load"; fi
    for file in /usr/share/zsh/vendor-completions/_$package /usr/share/fish/vendor_completions.d/$package.fish; do
      if [[ -s $file ]]; then pass "completion $file"; else fail "no completion $file"; fi
    done
    if have zsh && ! zsh -n "/usr/share/zsh/vendor-completions/_$package"; then fail "zsh completion does not parse"; fi
    if have fish && ! fish -n "/usr/share/fish/vendor_completions.d/$package.fish"; then fail "fish completion does not parse"; fi
    if [[ $(cat "$config") == '{"mcpServers": {}}' ]]; then pass "conffile $config"; else fail "conffile $config: $(cat "$config" 2>&1)"; fi
    if dpkg-query -W -f='${Conffiles}' "$package" | grep -q " $config "; then pass "dpkg knows $config as a conffile"; else fail "$config is not a conffile"; fi
    if [[ -L /etc/systemd/system/multi-user.target.wants/$unit ]]; then pass "$unit enabled"; else fail "$unit is not enabled (no multi-user.target.wants link)"; fi
    if ((systemd_up)); then
      start_daemon
      pass "$unit started by the installation"
    fi
    if have systemd-analyze; then
      if output=$(systemd-analyze verify --man="$man_check" "/usr/lib/systemd/system/$unit" 2>&1) && [[ -z $output ]]; then
        pass "systemd-analyze verify of the installed unit (man pages too: $man_check)"
      else
        fail "systemd-analyze verify of the installed unit:"$'\n'"$output"
      fi
    fi

    say "  the user edits the conffile, a server is stored in the data dir"
    edited='{"mcpServers": {"check-edited": {"command": "/bin/true", "disabled": true}}}'
    echo "$edited" >"$config"
    start_daemon
    "$bin" servers add check-stored --no-auto-connect --data-dir "$data" -- /bin/true >/dev/null ||
      fail "servers add check-stored"
    expect_servers check-stored check-edited
    stop_daemon

    say "  dpkg -i again (upgrade)"
    ((!systemd_up)) || pid_before=$(systemctl show -p MainPID --value "$unit")
    dpkg_run -i "$deb"
    if [[ $(cat "$config") == "$edited" ]]; then pass "the edited conffile is kept"; else fail "the conffile changed: $(cat "$config")"; fi
    start_daemon
    if ((systemd_up)); then
      pid_after=$(systemctl show -p MainPID --value "$unit")
      if [[ $pid_after != "$pid_before" ]]; then pass "$unit restarted by the upgrade (pid $pid_before, now $pid_after)"; else fail "$unit was not restarted by the upgrade"; fi
    fi
    expect_servers check-stored check-edited
    stop_daemon

    say "  dpkg -r"
    dpkg_run -r "$package"
    if [[ ! -e $bin ]]; then pass "$bin removed"; else fail "$bin is still there"; fi
    if ((systemd_up)); then
      if systemctl is-active --quiet "$unit"; then fail "$unit still runs"; else pass "$unit stopped"; fi
    fi
    if [[ -s $data/store.redb ]]; then pass "data kept ($data/store.redb)"; else fail "the data dir lost its store: $(ls -la "$data/" 2>&1)"; fi
    if [[ $(cat "$config" 2>/dev/null) == "$edited" ]]; then pass "conffile kept"; else fail "conffile not kept"; fi

    say "  dpkg --purge"
    dpkg_run --purge "$package"
    for path in "$bin" "${runtime_paths[@]}"; do
      if [[ -e $path || -L $path ]]; then fail "$path is still there"; else pass "$path gone"; fi
    done
    case $(status_of) in
      *not-installed) pass "dpkg: not installed" ;;
      *) fail "dpkg still has it: $(status_of)" ;;
    esac
    undo_install
    cleanup_install=:
    pass "the machine is as it was before"
  fi
fi

echo
if ((${#skipped[@]})); then
  say "skipped: ${skipped[*]}"
fi
if ((failures)); then
  say "$failures check(s) FAILED"
  exit 1
fi
say "all checks passed"
