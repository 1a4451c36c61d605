#!/bin/bash
# Stop exactly what up.sh started (the PIDs it recorded), undo its changes to the host
# (pods and their network namespaces, mounts, iptables KUBE-*/CNI-* rules, bridge, /etc/hosts
# line, sysctls, kubelet's host directories and cgroups), wipe the node state dir, then stop the
# control plane with ../k8s/down.sh (which wipes its state dir too). Idempotent.
# Keeps $QUORATE_K8S_HOME (binaries, images). See docs/development/testing.md. Adapted from shared/k8s-node/down.sh.
set -uo pipefail
# The current kit (unless QUORATE_K8S_KIT=v1.20), or nodes that the current kit started: current/down.sh.
if [ "${QUORATE_K8S_KIT:-current}" = current ] || grep -qs '^UP_KIT=current$' "${QUORATE_K8S_NODE_STATE:-/tmp/quorate-k8s-node}/env"; then
  exec "$(dirname "${BASH_SOURCE[0]}")/current/down.sh" "$@"
fi
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "[quorate k8s-node down] $*" >&2; }
T0=$(date +%s)
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
# stop what runs, whatever the environment says now
if [ -n "$UP_HOME" ] && [ "$UP_HOME" != "$HOME_DIR" ]; then
  log "the node was started with QUORATE_K8S_HOME=$UP_HOME; using that"
  HOME_DIR=$UP_HOME BIN=$UP_HOME/bin; export QUORATE_K8S_HOME=$UP_HOME
fi
if [ -n "$UP_CP_STATE" ] && [ "$UP_CP_STATE" != "$CP_STATE" ]; then
  log "the node was started with QUORATE_K8S_STATE=$UP_CP_STATE; using that"
  CP_STATE=$UP_CP_STATE; export QUORATE_K8S_STATE=$UP_CP_STATE
fi

# mountpoints at or below $1, deepest first (mountinfo escapes blanks as \040)
mounts_under() {
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == p || index(m, p "/") == 1) print m }' \
    /proc/self/mountinfo | sort -r
}
unmount_all_under() {
  local m n
  for n in 1 2 3 4 5; do   # several rounds: mounts can be stacked
    [ -n "$(mounts_under "$1")" ] || return 0
    mounts_under "$1" | while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
  [ -z "$(mounts_under "$1")" ] || log "could not unmount everything under $1"
}

# iptables: delete the rules in built-in chains that jump to KUBE-* / CNI-* chains
# (kubelet, kube-proxy, CNI portmap), then flush and delete those chains
clean_iptables() { # iptables | ip6tables
  local ipt=$1 t rule c chains
  command -v "$ipt-save" >/dev/null || return 0
  for t in $("$ipt-save" 2>/dev/null | awk '/^\*/ { t = substr($0, 2) } /^:(KUBE|CNI)-|-j (KUBE|CNI)-/ { print t }' | sort -u); do
    "$ipt-save" -t "$t" 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j (KUBE|CNI)-' |
      while IFS= read -r rule; do eval "$ipt -w -t $t -D ${rule#-A }" || log "$ipt: could not delete: $rule"; done
    chains=$("$ipt-save" -t "$t" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p')
    for c in $chains; do "$ipt" -w -t "$t" -F "$c"; done
    for c in $chains; do "$ipt" -w -t "$t" -X "$c" || log "$ipt: could not delete chain $t/$c"; done
  done
}

if [ -f "$MARKER" ]; then
  # 1. kubelet first, so that it does not restart what we remove
  stop_one kubelet "$BIN/kubelet"
  # 2. every pod sandbox through CRI: stops the containers, CNI DEL (veth, IP), removes the netns
  if is_ours containerd "$CONTAINERD" && [ -x "$BIN/cri-lite" ]; then
    n=$("$BIN/cri-lite" -endpoint "unix://$SOCK" pods 2>/dev/null | wc -l)
    log "removing $n pod sandbox(es)"
    "$BIN/cri-lite" -endpoint "unix://$SOCK" rmp-all >/dev/null || log "some sandboxes could not be removed"
  fi
  stop_one kube-proxy "$BIN/kube-proxy"
  stop_one apiserver-proxy "$SOCAT"
  stop_one containerd "$CONTAINERD"
  # 3. leftovers (containerd died early, or a removal failed): each task directory containerd
  #    left in its state dir names the container's init PID (init.pid, written by runc) and the
  #    socket of its shim (address); kill those containers, then stop their shims
  shims=""
  for d in "$CTRD"/state/io.containerd.runtime.v2.task/*/*/; do
    [ -d "$d" ] || continue
    id=$(basename "$d")
    pid=$(cat "$d/init.pid" 2>/dev/null || true)
    cand=""
    if [ -n "$pid" ] && alive "$pid" && grep -q kubepods "/proc/$pid/cgroup" 2>/dev/null; then
      cand=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f2)   # its parent: the shim
      log "killing leftover container ${id:0:13} (pid $pid)"; kill -KILL "$pid" 2>/dev/null || true
    fi
    addr=$(cat "$d/address" 2>/dev/null || true)
    [ -n "$addr" ] && cand="$cand $(ss -Hxlp src "${addr#unix://}" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2)"
    for p in $cand; do
      [ "$(exe_of "$p")" = "$SHIM" ] && tr '\0' ' ' < "/proc/$p/cmdline" | grep -qF -- "-address $SOCK" && shims="$shims $p"
    done
  done
  for p in $(tr ' ' '\n' <<<"$shims" | sort -u); do
    log "stopping leftover containerd-shim (pid $p)"; kill_pid "$p" containerd-shim
  done

  # 4. mounts: everything below the state dir (kubelet root bind mount, volumes, rootfs,
  #    sandbox /dev/shm), the network namespaces we added, /run/netns if we made it a mountpoint
  unmount_all_under "$NS"
  for e in $(ls -A /run/netns 2>/dev/null); do
    case "$e" in cni-*) ;; *) continue ;; esac   # containerd names them cni-<uuid>
    grep -qxF "$e" "$ORIG/netns-entries" 2>/dev/null && continue
    umount "/run/netns/$e" 2>/dev/null || umount -l "/run/netns/$e" 2>/dev/null || true
    rm -f "/run/netns/$e"
  done
  if [ "$(cat "$ORIG/netns-mountpoint" 2>/dev/null)" = no ] && mountpoint -q /run/netns && [ -z "$(ls -A /run/netns)" ]; then
    umount /run/netns 2>/dev/null || umount -l /run/netns 2>/dev/null || log "could not unmount /run/netns"
  fi

  # 5. firewall, conntrack, bridge, /etc/hosts, sysctls
  clean_iptables iptables
  clean_iptables ip6tables
  # connection-tracking entries of pod and Service addresses (they would linger for minutes)
  for f in "-s $POD_CIDR" "-d $POD_CIDR" "-d $SVC_CIDR"; do
    # shellcheck disable=SC2086
    conntrack -D $f >/dev/null 2>&1 || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" && log "deleted bridge $BRIDGE"; fi
  if grep -qF "$HOSTS_MARK" /etc/hosts; then
    # rewrite in place (keeps the inode: /etc/hosts may be a bind mount)
    grep -vF "$HOSTS_MARK" /etc/hosts > "$NS/hosts.new"; cat "$NS/hosts.new" > /etc/hosts; rm -f "$NS/hosts.new"
  fi
  if [ -f "$ORIG/sysctl" ]; then
    while IFS='=' read -r k v; do
      [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -qw "$k=$v" 2>/dev/null || log "could not restore $k=$v"
    done < "$ORIG/sysctl"
  fi

  # 6. host directories that kubelet / containerd / CNI use outside the state dir:
  #    what up.sh found absent is removed; where it existed, only what we added goes
  absent() { grep -qxF "$1" "$ORIG/absent-paths" 2>/dev/null; }
  if [ -f "$ORIG/absent-paths" ]; then
    # kubelet's own (only one kubelet can run here)
    for p in /var/lib/kubelet/device-plugins /var/lib/kubelet /var/log/pods /var/log/containers; do
      absent "$p" && [ -e "$p" ] && { unmount_all_under "$p"; rm -rf --one-file-system "$p"; }
    done
    for p in $(ls -d /var/log/pods/* /var/log/containers/* 2>/dev/null); do
      grep -qxF "$p" "$ORIG/log-entries" || rm -rf --one-file-system "$p"
    done
    # the CNI result cache: our network's entries
    rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null
    absent /var/lib/cni && rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null
    # shared with others: /run/netns only when empty; /run/containerd (our shims' sockets in s/,
    # a hard-coded path) unless another containerd has moved in
    absent /run/netns && [ -d /run/netns ] && { rmdir /run/netns 2>/dev/null || log "/run/netns is not empty; left"; }
    if absent /run/containerd && [ -d /run/containerd ]; then
      if [ -S /run/containerd/containerd.sock ]; then log "another containerd uses /run/containerd now; left"
      else rm -rf --one-file-system /run/containerd; fi
    fi
  fi

  # 7. cgroups kubelet made (pods are gone, so they are empty)
  if [ -f "$ORIG/cgroups" ]; then
    for c in $CGROUP_NAMES; do
      find /sys/fs/cgroup/*/"$c" -depth -type d 2>/dev/null | while IFS= read -r g; do
        grep -qxF "$g" "$ORIG/cgroups" || rmdir "$g" 2>/dev/null || log "could not remove cgroup $g"
      done
    done
  fi

  # 8. the state dir itself (never crossing into a mount that is still there)
  rm -rf --one-file-system "$NS" || log "could not remove all of $NS"
  [ -e "$NS" ] || log "wiped $NS"
elif [ -e "$NS" ]; then
  log "$NS is not a k8s-node state dir; leaving it alone"
fi

"$TESTENV/down.sh"
log "done in $(( $(date +%s) - T0 ))s"
