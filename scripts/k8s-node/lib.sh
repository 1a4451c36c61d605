# shellcheck shell=bash
# Settings and helpers shared by up.sh and down.sh (sourced, not run).
# Adapted from shared/k8s-node/lib.sh: the control plane is the project's scripts/k8s/ and the
# build cache is the project's ($QUORATE_K8S_HOME, default ~/.cache/quorate/k8s).

KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTENV=$KIT/../k8s               # the project's control plane: build.sh, up.sh, down.sh
HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s}
BIN=$HOME_DIR/bin
BASE_IMAGES=$HOME_DIR/images
CP_STATE=${QUORATE_K8S_STATE:-/tmp/quorate-k8s}
NS=$(readlink -m "${QUORATE_K8S_NODE_STATE:-/tmp/quorate-k8s-node}")
# the build and control-plane state a running node was started with (written by up.sh)
UP_HOME="" UP_CP_STATE=""
# shellcheck disable=SC1091
[ -f "$NS/env" ] && . "$NS/env"
export QUORATE_K8S_HOME=$HOME_DIR QUORATE_K8S_STATE=$CP_STATE
# what the node's daemons (and the tools they call: runc, iptables, mount, CNI) see
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

NODE_NAME=local-node
BRIDGE=cni-k8s0
NODE_IP=10.244.0.1            # gateway address of our bridge; kubelet refuses loopback node IPs
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.0.0.0/24          # the control plane's service CIDR (scripts/k8s/up.sh)
CLUSTER_DNS=10.0.0.10
CLUSTER_DOMAIN=cluster.local
CNI_NETWORK=k8s-node
PAUSE_IMAGE=k8s.local/pause:3.4
DNS_IMAGE=k8s.local/kube-dns-lite:0.1
# pods reach the loopback-only API server through $NODE_IP:$API_FWD_PORT (not 6443: the
# control plane's port check would then see it as taken when scripts/k8s/up.sh runs alone)
API_FWD_PORT=16443

CONTAINERD=/usr/bin/containerd
SHIM=/usr/bin/containerd-shim-runc-v2
SOCAT=/usr/bin/socat
CTRD=$NS/containerd
SOCK=$CTRD/containerd.sock
PIDS=$NS/pids
LOGS=$NS/logs
ORIG=$NS/host-orig            # how the host looked before the first up.sh (read by down.sh)
MARKER=$NS/.k8s-node-state
HOSTS_MARK="# quorate k8s-node $NODE_NAME (removed by scripts/k8s-node/down.sh)"

# Kernel settings that kubelet 1.20 (no "warn only" mode), kube-proxy (route_localnet)
# and the CNI bridge plugin (ip_forward) change. Saved by up.sh, restored by down.sh.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables"
# Host paths that kubelet / containerd / CNI create outside the state dir (hard-coded there).
# down.sh removes those that did not exist before up.sh.
HOST_PATHS="/var/lib/kubelet /var/lib/kubelet/device-plugins /var/log/pods /var/log/containers
/var/lib/cni /run/netns /run/containerd"
CGROUP_NAMES="kubepods"

# pid_of, exe_of, is_ours, alive, kill_pid, stop_one, wait_for
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/proc.sh"
