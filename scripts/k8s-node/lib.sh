# shellcheck shell=bash
# Settings and helpers of the node kit, shared by its build.sh, up.sh, down.sh and node.sh
# (sourced, not run). Three nodes on this machine, each its own network
# namespace with its own containerd and kubelet (+ kube-proxy); see README.md.

KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTENV=$KIT/../k8s               # the project's control plane: build-modules.sh, up.sh, down.sh
HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s-1.37}
BIN=$HOME_DIR/bin
BASE_IMAGES=$HOME_DIR/images
CP_STATE=${QUORATE_K8S_STATE:-/tmp/quorate-k8s}
NS=$(readlink -m "${QUORATE_K8S_NODE_STATE:-/tmp/quorate-k8s-node}")
UP_HOME="" UP_CP_STATE=""
# shellcheck disable=SC1091
[ -f "$NS/env" ] && . "$NS/env"
export QUORATE_K8S_HOME=$HOME_DIR QUORATE_K8S_STATE=$CP_STATE
# kube-apiserver runs on the host, kube-proxy only inside the nodes: webhooks by endpoint
export QUORATE_K8S_APISERVER_ENDPOINT_ROUTING=1
CALLER_PATH=$PATH               # build.sh needs the caller's Go
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

NODES="1 2 3"
node_name() { echo "quorate-node-$1"; }
node_netns() { echo "quorate-node-$1"; }
node_ip() { echo "10.245.0.1$1"; }          # on the host bridge
node_pod_cidr() { echo "10.244.$1.0/24"; }
node_pod_gw() { echo "10.244.$1.1"; }
node_dir() { echo "$NS/node-$1"; }
node_sock() { echo "$NS/node-$1/containerd/containerd.sock"; }
HOST_BRIDGE=quorate-nodes
HOST_IP=10.245.0.1                          # the host's address on that bridge: API forward, DNS
HOST_NET=10.245.0.0/24
POD_NET=10.244.0.0/16
CNI_BRIDGE=cni0                             # inside each node's namespace
SVC_CIDR=10.0.0.0/24                        # the control plane's (scripts/k8s/up.sh)
CLUSTER_DNS=10.0.0.10
CLUSTER_DOMAIN=cluster.local
CNI_NETWORK=k8s-node
PAUSE_IMAGE=k8s.local/pause:3.10
API_FWD_PORT=16443
DNS_HEALTH_PORT=18053

CONTAINERD=$BIN/containerd
SHIM=$BIN/containerd-shim-runc-v2
CRICTL=$BIN/crictl
COREDNS=$BIN/coredns
SOCAT=/usr/bin/socat
CNI_BIN=/usr/lib/cni
PIDS=$NS/pids
LOGS=$NS/logs
ORIG=$NS/host-orig
MARKER=$NS/.k8s-node-state
HOSTS_MARK="# quorate k8s-node kit (removed by scripts/k8s-node/down.sh)"

# Kernel settings kubelet (vm.*, kernel.*) and the host's routing change (saved, restored).
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward"
# Host paths kubelet / containerd / CNI create outside the state dir (hard-coded there).
HOST_PATHS="/var/lib/kubelet /var/lib/kubelet/device-plugins /var/lib/cni /run/netns /run/containerd"

# pid_of, exe_of, is_ours, alive, kill_pid, stop_one, wait_for
# shellcheck disable=SC1091
. "$KIT/proc.sh"
# in_node I CMD...: run CMD in node I's network namespace only (mounts and PIDs stay the
# host's, so kubelet's volume mounts are the ones containerd sees)
in_node() { local i=$1; shift; nsenter --net="/run/netns/$(node_netns "$i")" -- "$@"; }
