#!/bin/bash
# Stop exactly what the kit's up.sh started (recorded PIDs), remove every pod sandbox
# through CRI (crictl), then undo its host changes (node network namespaces, host bridge, routes,
# iptables KUBE-*/CNI-* rules inside the namespaces go with them, /etc/hosts lines, sysctls,
# cgroups, kubelet's host directories), wipe the node state dir and stop the control plane
# (../k8s/down.sh). Idempotent. Keeps $QUORATE_K8S_HOME.
set -uo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "[quorate k8s-node down] $*" >&2; }
T0=$(date +%s)
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
if [ -n "$UP_HOME" ] && [ "$UP_HOME" != "$HOME_DIR" ]; then
  log "the nodes were started with QUORATE_K8S_HOME=$UP_HOME; using that"
  HOME_DIR=$UP_HOME BIN=$UP_HOME/bin CONTAINERD=$UP_HOME/bin/containerd SHIM=$UP_HOME/bin/containerd-shim-runc-v2
  CRICTL=$UP_HOME/bin/crictl COREDNS=$UP_HOME/bin/coredns; export QUORATE_K8S_HOME=$UP_HOME
fi
if [ -n "$UP_CP_STATE" ] && [ "$UP_CP_STATE" != "$CP_STATE" ]; then
  CP_STATE=$UP_CP_STATE; export QUORATE_K8S_STATE=$UP_CP_STATE
fi
mounts_under() { # mountpoints at or below $1, deepest first
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == p || index(m, p "/") == 1) print m }' \
    /proc/self/mountinfo | sort -r
}
unmount_all_under() {
  local m r
  for r in 1 2 3 4 5; do
    [ -n "$(mounts_under "$1")" ] || return 0
    mounts_under "$1" | while IFS= read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  [ -z "$(mounts_under "$1")" ] || log "could not unmount everything under $1"
}

if [ -f "$MARKER" ]; then
  stop_one coredns "$COREDNS"
  for i in $NODES; do stop_one "kubelet-$i" "$BIN/kubelet"; done
  for i in $NODES; do
    if is_ours "containerd-$i" "$CONTAINERD"; then
      c="$CRICTL --runtime-endpoint unix://$(node_sock "$i") --timeout 30s"
      n=$($c pods -q 2>/dev/null | wc -l)
      log "node $i: removing $n pod sandbox(es)"
      [ "$n" = 0 ] || $c rmp -fa >/dev/null 2>&1 || log "node $i: some sandboxes could not be removed"
    fi
    stop_one "kube-proxy-$i" "$BIN/kube-proxy"
    stop_one "containerd-$i" "$CONTAINERD"
  done
  stop_one apiserver-proxy "$SOCAT"
  # leftover shims of our containerds (their -address names our socket) and their containers
  for p in $(pgrep -x containerd-shim 2>/dev/null); do
    [ "$(exe_of "$p")" = "$(readlink -f "$SHIM")" ] || continue
    [[ "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)" == *"$NS/"* ]] || continue
    for k in $(cat /proc/"$p"/task/*/children 2>/dev/null); do kill -KILL "$k" 2>/dev/null || true; done
    log "stopping leftover containerd-shim (pid $p)"; kill_pid "$p" containerd-shim
  done
  unmount_all_under "$NS"
  # pod network namespaces containerd left (it names them cni-<uuid>) that were not there before
  for e in $(ls -A /run/netns 2>/dev/null); do
    case "$e" in cni-*) ;; *) continue ;; esac
    grep -qxF "$e" "$ORIG/netns-entries" 2>/dev/null && continue
    umount "/run/netns/$e" 2>/dev/null || umount -l "/run/netns/$e" 2>/dev/null || true
    rm -f "/run/netns/$e"
  done
  for i in $NODES; do
    n=$(node_netns "$i")
    ip route del "$(node_pod_cidr "$i")" 2>/dev/null || true
    ip link del "qk8s-n$i" 2>/dev/null || true
    [ -e "/run/netns/$n" ] && { ip netns del "$n" && log "deleted network namespace $n"; }
    for h in /sys/fs/cgroup/*/"$n"; do
      [ -d "$h" ] || continue
      find "$h" -depth -type d | while IFS= read -r g; do rmdir "$g" 2>/dev/null || log "could not remove cgroup $g"; done
    done
  done
  if ip link show "$HOST_BRIDGE" >/dev/null 2>&1; then ip link del "$HOST_BRIDGE" && log "deleted bridge $HOST_BRIDGE"; fi
  for f in "-s $POD_NET" "-d $POD_NET" "-d $SVC_CIDR"; do
    # shellcheck disable=SC2086
    conntrack -D $f >/dev/null 2>&1 || true
  done
  if grep -qF "$HOSTS_MARK" /etc/hosts; then
    grep -vF "$HOSTS_MARK" /etc/hosts > "$NS/hosts.new"; cat "$NS/hosts.new" > /etc/hosts; rm -f "$NS/hosts.new"
  fi
  if [ -f "$ORIG/sysctl" ]; then
    while IFS='=' read -r k v; do
      [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -qw "$k=$v" 2>/dev/null || log "could not restore $k=$v"
    done < "$ORIG/sysctl"
  fi
  absent() { grep -qxF "$1" "$ORIG/absent-paths" 2>/dev/null; }
  if [ -f "$ORIG/absent-paths" ]; then
    for p in /var/lib/kubelet/device-plugins /var/lib/kubelet; do
      absent "$p" && [ -e "$p" ] && { unmount_all_under "$p"; rm -rf --one-file-system "$p"; }
    done
    rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null
    absent /var/lib/cni && rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null
    absent /run/netns && [ -d /run/netns ] && { rmdir /run/netns 2>/dev/null || log "/run/netns is not empty; left"; }
    if absent /run/containerd && [ -d /run/containerd ]; then
      if [ -S /run/containerd/containerd.sock ]; then log "another containerd uses /run/containerd now; left"
      else rm -rf --one-file-system /run/containerd; fi
    fi
  fi
  rm -rf --one-file-system "$NS" || log "could not remove all of $NS"
  [ -e "$NS" ] || log "wiped $NS"
elif [ -e "$NS" ]; then
  log "$NS is not a k8s-node state dir; leaving it alone"
fi

"$TESTENV/down.sh"
log "done in $(( $(date +%s) - T0 ))s"
