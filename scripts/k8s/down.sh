#!/usr/bin/env bash
# Stops exactly the processes that scripts/k8s/up.sh started (by the PIDs it recorded),
# then wipes its state dir (etcd data, PKI, logs). Leaves the binaries alone.
set -uo pipefail

HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s-1.37}
BIN=$HOME_DIR/bin
STATE=${QUORATE_K8S_STATE:-/tmp/quorate-k8s}
PIDS=$STATE/pids

log() { echo "[quorate k8s down] $*" >&2; }

stop_one() { # name binary-path
  local name=$1 bin=$2 f=$PIDS/$1.pid pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ -n "$pid" ] && [ -d /proc/$pid ] && \
     [ "$(readlink -f /proc/$pid/exe 2>/dev/null || true)" = "$(readlink -f "$bin")" ]; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do [ -d /proc/$pid ] || break; sleep 0.25; done
    if [ -d /proc/$pid ]; then
      log "$name (pid $pid) did not exit, sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 20; i++)); do [ -d /proc/$pid ] || break; sleep 0.25; done
    fi
  else
    log "$name: recorded pid ${pid:-?} is not running (or is not ours); skipping"
  fi
  rm -f "$f"
}

# reverse start order
stop_one kube-scheduler "$BIN/kube-scheduler"
stop_one kube-controller-manager "$BIN/kube-controller-manager"
stop_one kube-apiserver "$BIN/kube-apiserver"
stop_one etcd /usr/bin/etcd

case "$STATE" in
  /tmp/quorate-k8s*) if [ -d "$STATE" ]; then rm -rf "$STATE"; log "wiped $STATE"; fi ;;
  *) log "refusing to wipe unexpected state dir $STATE" ;;
esac

log "done"
