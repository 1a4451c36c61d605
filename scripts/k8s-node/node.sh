#!/bin/bash
# node.sh lose N | return N: one node of the kit lost as a machine is lost (powered off,
# or cut off the network), and brought back.
#
#   lose N    node N's link to the host bridge goes down first, so its address and its pods' stop
#             answering (packets are lost, not refused, as with a machine that is gone); then its
#             kubelet, kube-proxy, every container of the node (SIGKILL, no graceful stop) and its
#             containerd stop. The API server keeps the Node and its pods, as it does for a real
#             lost node: the node controller marks them NotReady after its grace period.
#   return N  the link comes back and up.sh starts what is missing (containerd, kubelet,
#             kube-proxy of node N); kubelet starts the node's pods again on their volumes.
#
# Needs root and a running kit (up.sh). Idempotent.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "[quorate k8s-node node] $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
[ $# = 2 ] || die "usage: $0 lose|return N (N in: $NODES)"
action=$1 i=${2##*-}   # N, or the node name quorate-node-N
grep -qw -- "$i" <<<"$NODES" || die "no node $i (nodes: $NODES)"
[ -f "$MARKER" ] || die "the kit is not up ($NS): run up.sh first"
veth=qk8s-n$i

case $action in
lose)
  ip link set "$veth" down
  log "node $i ($(node_name "$i")): network down"
  stop_one "kubelet-$i" "$BIN/kubelet"
  stop_one "kube-proxy-$i" "$BIN/kube-proxy"
  # the node's containers, killed where they stand: each shim of this node's containerd (its
  # command line names the node's socket) with the processes it runs
  for p in $(pgrep -x containerd-shim 2>/dev/null); do
    [ "$(exe_of "$p")" = "$(readlink -f "$SHIM")" ] || continue
    [[ "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)" == *"$(node_dir "$i")/"* ]] || continue
    for k in $(cat /proc/"$p"/task/*/children 2>/dev/null); do kill -KILL "$k" 2>/dev/null || true; done
    kill -KILL "$p" 2>/dev/null || true
  done
  stop_one "containerd-$i" "$CONTAINERD"
  log "node $i lost: kubelet, kube-proxy, containers and containerd stopped"
  ;;
return)
  ip link set "$veth" up
  log "node $i ($(node_name "$i")): network up; starting what is missing (up.sh)"
  "$KIT/up.sh" >/dev/null
  log "node $i back"
  ;;
*) die "unknown action $action (lose or return)" ;;
esac
