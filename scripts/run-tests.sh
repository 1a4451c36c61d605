#!/usr/bin/env bash
# Builds every test binary of the workspace and runs them side by side in QUORATE_TEST_JOBS lanes
# (default 3): most of them wait on etcd and on their own child processes rather than compute, so
# running them one after another, as `cargo test` does, leaves the machine idle. The binaries in
# ALONE (fault runs and crash tests that count failed writes under a 5 s timeout) run afterwards,
# one at a time, with nothing beside them.
#
# Each lane gets its own port ranges below the OS's ephemeral range, one for quorate-testkit
# (QUORATE_TEST_PORTS) and one for the ports local clusters choose (QUORATE_LOCAL_PORTS), so a port
# one binary probed, released or keeps for a stopped member is never taken by another. A binary
# runs in its package's directory, as under `cargo test`. Output: one line per binary as it ends,
# the whole output of each that failed, the slowest ten, and exit status 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${QUORATE_TEST_JOBS:-3}
ALONE="chaos local_crash"
# Long binaries start first, so no lane is left with one of them at the end.
FIRST="restore_large local_evidence local_backups local_mode store_swift local_maintenance
local_version_chain local_scale agent_kubernetes controller kubectl_plugin"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "[quorate test] $*" >&2; }

cargo test --workspace --all-targets --no-run --message-format=json-render-diagnostics |
  jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
         | [.executable, (.manifest_path | sub("/Cargo.toml$"; "")), .target.name] | @tsv' \
    >"$work/all"

: >"$work/queue"
for name in $FIRST; do awk -F'\t' -v n="$name" '$3 == n' "$work/all" >>"$work/queue"; done
awk -F'\t' -v skip=" $(echo $FIRST $ALONE) " 'index(skip, " " $3 " ") == 0' "$work/all" >>"$work/queue"
: >"$work/alone"
for name in $ALONE; do awk -F'\t' -v n="$name" '$3 == n' "$work/all" >>"$work/alone"; done
log "$(wc -l <"$work/all") test binaries: $(wc -l <"$work/queue") in $jobs lanes, then $(wc -l <"$work/alone") alone"

# Takes the first line of queue file $1 (empty output when it is empty).
pop() {
  (
    flock 9
    head -n 1 "$1"
    sed -i 1d "$1"
  ) 9>"$1.lock"
}

# Runs one binary (a line of the list) with the port range variables $2; records "seconds name
# status".
run_one() {
  local exe dir name out t0 status=0
  IFS=$'\t' read -r exe dir name <<<"$1"
  out="$work/$(basename "$exe").log"
  t0=$SECONDS
  (cd "$dir" && env QUORATE_E2E= $2 CARGO_MANIFEST_DIR="$dir" "$exe") >"$out" 2>&1 ||
    status=$?
  (
    flock 9
    echo "$((SECONDS - t0)) $name $status" >>"$work/times"
    if [ "$status" = 0 ]; then
      log "$name: $(grep -h '^test result:' "$out" | tail -n 1) (${dir#"$PWD"/})"
    else
      cat "$out" >&2
      log "$name FAILED (exit $status, ${dir#"$PWD"/})"
      echo "$name (${dir#"$PWD"/})" >>"$work/failed"
    fi
  ) 9>"$work/print.lock"
}

# Lane $1 of $jobs: [10000, 20000) for the testkit and [20000, 32000) for local clusters, each
# split evenly.
lane() {
  local t=$((10000 / jobs)) l=$((12000 / jobs)) item
  local ports="QUORATE_TEST_PORTS=$((10000 + ($1 - 1) * t))-$((10000 + $1 * t))"
  ports="$ports QUORATE_LOCAL_PORTS=$((20000 + ($1 - 1) * l))-$((20000 + $1 * l))"
  while item=$(pop "$work/$2") && [ -n "$item" ]; do run_one "$item" "$ports"; done
}

for i in $(seq 1 "$jobs"); do lane "$i" queue & done
wait
lane 1 alone

log "slowest: $(sort -rn "$work/times" | head -n 10 | awk '{printf "%s %ss; ", $2, $1}')"
if [ -s "$work/failed" ]; then
  log "FAILED: $(tr '\n' ' ' <"$work/failed")"
  exit 1
fi
log "all $(wc -l <"$work/times") test binaries passed"
