#!/bin/bash
# Start the node kit: the loopback control plane of ../k8s/up.sh
# on Kubernetes v1.37.2, then three nodes quorate-node-{1,2,3}, each in its own network
# namespace (address 10.245.0.1N on the host bridge quorate-nodes, pods 10.244.N.0/24, routed
# through the host) with its own containerd v2 + runc, CNI bridge, kubelet and kube-proxy
# (iptables); a TCP forward so pods and kubelets reach the API server; CoreDNS (host process on
# 10.245.0.1:53, the Service kube-dns 10.0.0.10) answering forward and reverse (PTR) lookups.
# Waits until every node is Ready and DNS answers, imports the base images and every image
# tarball in $QUORATE_K8S_NODE_IMAGES into every node, prints the admin kubeconfig path last.
# Idempotent (recorded PID, same binary, same configuration: left alone). Needs root and the
# output of build.sh; down.sh undoes everything.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "[quorate k8s-node up] $*" >&2; }
die() { log "$*"; exit 1; }
T0=$(date +%s)
trap 'rc=$?; [ $rc -eq 0 ] || log "FAILED (exit $rc). Logs: $LOGS, $CP_STATE/logs. down.sh undoes what was started."' EXIT

[ "$(id -u)" = 0 ] || die "must run as root"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl containerd \
         containerd-shim-runc-v2 ctr crictl coredns; do
  [ -x "$BIN/$b" ] || die "missing $BIN/$b: run scripts/k8s-node/build.sh"
done
for i in pause busybox; do
  [ -f "$BASE_IMAGES/$i.tar" ] || die "missing $BASE_IMAGES/$i.tar: run build.sh first"
done
for b in /usr/sbin/runc $SOCAT $CNI_BIN/bridge $CNI_BIN/host-local $CNI_BIN/loopback $CNI_BIN/portmap \
         /usr/sbin/iptables /usr/sbin/conntrack /usr/bin/nsenter /bin/busybox; do
  [ -x "$b" ] || die "missing $b: run build.sh first"
done
if [ -n "${QUORATE_K8S_NODE_IMAGES:-}" ] && [ ! -d "$QUORATE_K8S_NODE_IMAGES" ]; then
  die "QUORATE_K8S_NODE_IMAGES=$QUORATE_K8S_NODE_IMAGES is not a directory"
fi

# ---- state dir; how the host looked before ----
if [ ! -f "$MARKER" ]; then
  if [ -d "$NS" ] && [ -n "$(ls -A "$NS")" ]; then
    die "$NS exists, is not empty and is not a k8s-node state dir (set QUORATE_K8S_NODE_STATE)"
  fi
  mkdir -p "$NS"; touch "$MARKER"
fi
if [ -n "$UP_HOME" ] && { [ "$UP_HOME" != "$HOME_DIR" ] || [ "$UP_CP_STATE" != "$CP_STATE" ]; }; then
  die "the nodes in $NS run with QUORATE_K8S_HOME=$UP_HOME QUORATE_K8S_STATE=$UP_CP_STATE; run down.sh first"
fi
printf 'UP_HOME=%q\nUP_CP_STATE=%q\n' "$HOME_DIR" "$CP_STATE" > "$NS/env"
mkdir -p "$PIDS" "$LOGS" "$NS/pki"
chmod 700 "$NS/pki"
if [ ! -f "$ORIG/done" ]; then
  mkdir -p "$ORIG"
  for s in $SYSCTLS; do v=$(sysctl -n "$s" 2>/dev/null) && echo "$s=$v"; done > "$ORIG/sysctl"
  for p in $HOST_PATHS; do [ -e "$p" ] || echo "$p"; done > "$ORIG/absent-paths"
  ls -A /run/netns 2>/dev/null > "$ORIG/netns-entries" || true
  touch "$ORIG/done"
fi

# ---- control plane ----
log "control plane: scripts/k8s/up.sh"
KUBECONFIG_ADMIN=$("$TESTENV/up.sh" | tail -n 1)
[ -f "$KUBECONFIG_ADMIN" ] || die "scripts/k8s/up.sh printed no kubeconfig"
KC="$BIN/kubectl --kubeconfig $KUBECONFIG_ADMIN"
CA=$CP_STATE/pki/ca.crt
[ -f "$CA" ] && [ -f "$CP_STATE/pki/ca.key" ] || die "no control-plane CA in $CP_STATE/pki"
API_URL=$($KC config view --minify -o jsonpath='{.clusters[0].cluster.server}')
API_HOSTPORT=${API_URL#https://}

# start_bg NAME "configuration files" NODE|- EXE ARGS...: (re)starts NAME (in node NODE's network
# namespace, or the host's for -) unless its recorded PID runs EXE with the same configuration
start_bg() {
  local name=$1 files=$2 node=$3 exe=$4 sig; shift 4
  # shellcheck disable=SC2086
  sig=$( { echo "$node $exe $*"; cat $files 2>/dev/null; } | sha256sum | cut -d' ' -f1)
  if is_ours "$name" "$exe"; then
    if [ "$(cat "$PIDS/$name.sig" 2>/dev/null)" = "$sig" ]; then
      log "$name already running (pid $(pid_of "$name"))"; return 0
    fi
    log "$name: configuration changed, restarting"; stop_one "$name" "$exe"
  fi
  log "starting $name"
  if [ "$node" = - ]; then
    setsid nohup "$exe" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  else
    # nsenter execs EXE in place: the recorded PID is EXE's
    setsid nohup nsenter --net="/run/netns/$(node_netns "$node")" -- "$exe" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  fi
  echo $! > "$PIDS/$name.pid"; echo "$sig" > "$PIDS/$name.sig"
}

# ---- host network: bridge, one namespace per node, routes to the pod ranges ----
# has_addr NETNS|"" DEV ADDR/LEN: DEV has that address. (Not `ip addr show | grep -q`: under
# pipefail, grep quitting at the first match can make ip die of SIGPIPE on its next line, and
# the address would be added a second time; seen as "Address already assigned" on a rerun.)
has_addr() {
  local out
  out=$(ip ${1:+-n "$1"} -o -4 addr show dev "$2") || return 1
  grep -qF " inet $3 " <<<"$out"
}
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1
ip link show "$HOST_BRIDGE" >/dev/null 2>&1 || { log "creating bridge $HOST_BRIDGE $HOST_IP/24"; ip link add "$HOST_BRIDGE" type bridge; }
has_addr "" "$HOST_BRIDGE" "$HOST_IP/24" || ip addr add "$HOST_IP/24" dev "$HOST_BRIDGE"
ip link set "$HOST_BRIDGE" up
for i in $NODES; do
  n=$(node_netns "$i") veth=qk8s-n$i
  [ -e "/run/netns/$n" ] || { log "creating network namespace $n"; ip netns add "$n"; }
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$n"
  fi
  ip link set "$veth" master "$HOST_BRIDGE" up
  ip -n "$n" link set lo up
  has_addr "$n" eth0 "$(node_ip "$i")/24" || ip -n "$n" addr add "$(node_ip "$i")/24" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" route replace default via "$HOST_IP"
  # the node's CNI bridge, pre-created so that its gateway address exists before the first pod
  ip -n "$n" link show "$CNI_BRIDGE" >/dev/null 2>&1 || ip -n "$n" link add "$CNI_BRIDGE" type bridge
  has_addr "$n" "$CNI_BRIDGE" "$(node_pod_gw "$i")/24" || ip -n "$n" addr add "$(node_pod_gw "$i")/24" dev "$CNI_BRIDGE"
  ip -n "$n" link set "$CNI_BRIDGE" up
  in_node "$i" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.route_localnet=1
  in_node "$i" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || log "no br_netfilter in $n"
  ip route replace "$(node_pod_cidr "$i")" via "$(node_ip "$i")"
  # cgroup parent of the node's pods (kubelet --cgroup-root), in every v1 hierarchy
  for h in /sys/fs/cgroup/*/; do
    case $h in */unified/) continue ;; esac   # kubelet checks every v1 hierarchy, name=systemd too
    d=$h$n
    [ -d "$d" ] || mkdir "$d"
    if [ -f "$h/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
      cat "$h/cpuset.cpus" > "$d/cpuset.cpus"; cat "$h/cpuset.mems" > "$d/cpuset.mems"
    fi
  done
done

# The apiserver dials each kubelet by node name: make them resolve.
if ! grep -qF "$HOSTS_MARK" /etc/hosts; then
  for i in $NODES; do echo "$(node_ip "$i") $(node_name "$i") $HOSTS_MARK"; done >> /etc/hosts
fi

# ---- API forward: $HOST_IP:$API_FWD_PORT -> the loopback-only kube-apiserver ----
start_bg apiserver-proxy "" - $SOCAT TCP-LISTEN:$API_FWD_PORT,bind=$HOST_IP,reuseaddr,fork TCP:$API_HOSTPORT
wait_for "API forward on $HOST_IP:$API_FWD_PORT" 30 curl -ksS -o /dev/null "https://$HOST_IP:$API_FWD_PORT/" \
  || { tail -5 "$LOGS/apiserver-proxy.log" >&2; exit 1; }
API_NODE_URL=https://$HOST_IP:$API_FWD_PORT

# ---- credentials, signed by the control plane's CA ----
sign_client() { # name subject
  local n=$1 subj=$2 d=$NS/pki
  if [ -f "$d/$n.crt" ] && openssl verify -CAfile "$CA" "$d/$n.crt" >/dev/null 2>&1; then return 0; fi
  log "issuing $n certificate ($subj)"
  openssl req -newkey rsa:2048 -nodes -keyout "$d/$n.key" -out "$d/$n.csr" -subj "$subj" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > "$d/$n.ext"
  openssl x509 -req -in "$d/$n.csr" -CA "$CA" -CAkey "$CP_STATE/pki/ca.key" -CAcreateserial \
    -CAserial "$d/ca.srl" -out "$d/$n.crt" -days 3650 -extfile "$d/$n.ext" 2>/dev/null
  rm -f "$d/$n.csr" "$d/$n.ext"; chmod 600 "$d/$n.key"
}
write_kubeconfig() { # file user cert key server
  local f=$1 user=$2 crt=$3 key=$4 server=$5
  cat > "$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    tls-server-name: kubernetes
    certificate-authority-data: $(base64 -w0 < "$CA")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$crt")
    client-key-data: $(base64 -w0 < "$key")
contexts:
- name: local
  context: {cluster: local, user: $user}
current-context: local
EOF
  chmod 600 "$f.tmp"; mv "$f.tmp" "$f"
}
sign_client kube-proxy "/CN=system:kube-proxy"
write_kubeconfig "$NS/kube-proxy.kubeconfig" system:kube-proxy "$NS/pki/kube-proxy.crt" "$NS/pki/kube-proxy.key" "$API_NODE_URL"
sign_client coredns "/CN=system:quorate-coredns"
write_kubeconfig "$NS/coredns.kubeconfig" system:quorate-coredns "$NS/pki/coredns.crt" "$NS/pki/coredns.key" "$API_URL"

# RBAC only (no Node authorizer): the node group gets system:node; CoreDNS reads what its
# kubernetes plugin watches.
$KC apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "k8s-node:nodes"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "k8s-node:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "k8s-node:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "k8s-node:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:quorate-coredns"}
EOF

# ---- per node: containerd, images, kubelet, kube-proxy ----
for i in $NODES; do
  D=$(node_dir "$i") name=$(node_name "$i") n=$(node_netns "$i")
  CTRD=$D/containerd SOCK=$(node_sock "$i")
  mkdir -p "$CTRD" "$D/cni/net.d" "$D/cni/ipam" "$D/kubelet/root" "$D/kubelet/pki" \
    "$D/kubelet/volume-plugins" "$D/pod-logs"
  [ $(( ${#SOCK} + 6 )) -lt 108 ] || die "QUORATE_K8S_NODE_STATE path too long for a unix socket: $SOCK"
  cat > "$CTRD/config.toml.tmp" <<EOF
# generated by scripts/k8s-node/up.sh for $name
version = 3
root = "$CTRD/root"
state = "$CTRD/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
# Each node its own NRI socket: on the default (/var/run/nri/nri.sock) the three containerds
# race, and one that loses exits ("address already in use"; a CI run's kit failed so).
[plugins."io.containerd.nri.v1.nri"]
  socket_path = "$CTRD/nri.sock"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  # no CAP_SYS_RESOURCE for the negative oom_score_adj pause gets: clamp to containerd's own
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_BIN"]
    conf_dir = "$D/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
        Root = "$CTRD/runc"
EOF
  mv "$CTRD/config.toml.tmp" "$CTRD/config.toml"
  cat > "$D/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$D/cni/ipam",
        "ranges": [[{ "subnet": "$(node_pod_cidr "$i")", "gateway": "$(node_pod_gw "$i")" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
  # containerd finds its shim (containerd-shim-runc-v2) on PATH
  PATH=$BIN:$PATH start_bg "containerd-$i" "$CTRD/config.toml" "$i" "$CONTAINERD" --config "$CTRD/config.toml"
done
# ctr SOCK ARGS...: ctr without its cgroup v1 deprecation warning (printed on every call here)
ctr_quiet() {
  local sock=$1; shift
  "$BIN/ctr" --address "$sock" -n k8s.io "$@" 2> >(grep -v 'support for cgroup v1 is deprecated' >&2)
}
for i in $NODES; do
  SOCK=$(node_sock "$i")
  CTR="ctr_quiet $SOCK"
  wait_for "containerd of node $i" 60 $CTR version || { tail -20 "$LOGS/containerd-$i.log" >&2; exit 1; }
  # images: base images + $QUORATE_K8S_NODE_IMAGES (no registry); again when changed or gone
  D=$(node_dir "$i"); touch "$D/imported"
  have=$($CTR images ls -q)
  for f in "$BASE_IMAGES"/pause.tar "$BASE_IMAGES"/busybox.tar \
           ${QUORATE_K8S_NODE_IMAGES:+"$QUORATE_K8S_NODE_IMAGES"/*.tar "$QUORATE_K8S_NODE_IMAGES"/*.tar.gz "$QUORATE_K8S_NODE_IMAGES"/*.tgz}; do
    [ -f "$f" ] || continue
    f=$(readlink -f "$f")
    sig="$(stat -c '%s %Y' "$f") $f"
    ref=$(tar -xOf "$f" manifest.json 2>/dev/null | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p' || true)
    if grep -qxF "$sig" "$D/imported" && { [ -z "$ref" ] || grep -qxF "$ref" <<<"$have"; }; then continue; fi
    log "node $i: importing $f${ref:+ ($ref)}"
    $CTR images import "$f" >/dev/null || die "ctr images import $f failed on node $i"
    awk -v f="$f" '{ p = $0; sub(/^[0-9]+ [0-9]+ /, "", p) } p != f' "$D/imported" > "$D/imported.tmp"
    echo "$sig" >> "$D/imported.tmp"; mv "$D/imported.tmp" "$D/imported"
  done
done

for i in $NODES; do
  D=$(node_dir "$i") name=$(node_name "$i") ip=$(node_ip "$i")
  sign_client "kubelet-$i" "/O=system:nodes/CN=system:node:$name"
  write_kubeconfig "$D/kubelet.kubeconfig" "system:node:$name" "$NS/pki/kubelet-$i.crt" "$NS/pki/kubelet-$i.key" "$API_NODE_URL"
  cat > "$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$(node_sock "$i")
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CA}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
# this machine has cgroup v1; 1.37 refuses it unless told otherwise
failCgroupV1: false
cgroupRoot: /$(node_netns "$i")
podLogsDir: $D/pod-logs
volumePluginDir: $D/kubelet/volume-plugins
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$CLUSTER_DNS]
resolvConf: /etc/resolv.conf
failSwapOn: true
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
# The kit's images are imported, not pullable: image GC must never delete them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 100
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
EOF
  start_bg "kubelet-$i" "$D/kubelet/config.yaml $D/kubelet.kubeconfig $CA" "$i" "$BIN/kubelet" \
    --config="$D/kubelet/config.yaml" \
    --kubeconfig="$D/kubelet.kubeconfig" \
    --root-dir="$D/kubelet/root" \
    --cert-dir="$D/kubelet/pki" \
    --hostname-override="$name" \
    --node-ip="$ip" \
    --v=1
done
node_ready() {
  [ "$($KC get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
for i in $NODES; do
  wait_for "node $(node_name "$i") Ready" 180 node_ready "$(node_name "$i")" || { tail -30 "$LOGS/kubelet-$i.log" >&2; exit 1; }
done
log "nodes Ready: $(for i in $NODES; do printf '%s ' "$(node_name "$i")"; done)"

for i in $NODES; do
  start_bg "kube-proxy-$i" "$NS/kube-proxy.kubeconfig" "$i" "$BIN/kube-proxy" \
    --kubeconfig="$NS/kube-proxy.kubeconfig" \
    --hostname-override="$(node_name "$i")" \
    --bind-address="$(node_ip "$i")" \
    --healthz-bind-address=127.0.0.1:10256 \
    --metrics-bind-address=127.0.0.1:10249 \
    --cluster-cidr=$POD_NET \
    --proxy-mode=iptables \
    --nodeport-addresses="$(node_ip "$i")/32" \
    --conntrack-max-per-core=0 \
    --conntrack-tcp-timeout-established=0 \
    --conntrack-tcp-timeout-close-wait=0 \
    --v=1
done
for i in $NODES; do
  wait_for "kube-proxy of node $i" 60 in_node "$i" curl -fsS http://127.0.0.1:10256/healthz \
    || { tail -20 "$LOGS/kube-proxy-$i.log" >&2; exit 1; }
done

# ---- Services backed by host processes: the API forward and CoreDNS ----
# kube-apiserver runs with --endpoint-reconciler-type=none: the `kubernetes` Service points at
# the forward (its serving certificate has IP SAN 10.0.0.1 and kubernetes.default.svc).
$KC apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Endpoints
metadata: {name: kubernetes, namespace: default}
subsets:
- addresses: [{ip: $HOST_IP}]
  ports: [{name: https, port: $API_FWD_PORT, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: quorate-k8s-node}
addressType: IPv4
endpoints: [{addresses: [$HOST_IP], conditions: {ready: true}}]
ports: [{name: https, port: $API_FWD_PORT, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $CLUSTER_DNS
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: quorate-k8s-node}
addressType: IPv4
endpoints: [{addresses: [$HOST_IP], conditions: {ready: true}}]
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF
# CoreDNS as a host process: the kubernetes plugin answers cluster names and the reverse zones
# (PTR for Service and endpoint addresses: a StatefulSet pod's IP gives
# <pod>.<headless service>.<namespace>.svc.cluster.local, which etcd's peer check looks up).
cat > "$NS/Corefile.tmp" <<EOF
.:53 {
    bind $HOST_IP
    errors
    health $HOST_IP:$DNS_HEALTH_PORT
    ready $HOST_IP:$((DNS_HEALTH_PORT + 1))
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $NS/coredns.kubeconfig local
        pods verified
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
}
EOF
mv "$NS/Corefile.tmp" "$NS/Corefile"
start_bg coredns "$NS/Corefile $NS/coredns.kubeconfig" - "$COREDNS" -conf "$NS/Corefile"
wait_for "CoreDNS ready" 60 curl -fsS "http://$HOST_IP:$((DNS_HEALTH_PORT + 1))/ready" \
  || { tail -20 "$LOGS/coredns.log" >&2; exit 1; }
dns_answers() { # from node 1, through the Service address
  grep -q '10\.0\.0\.1$' <<<"$(in_node 1 /bin/busybox nslookup "kubernetes.default.svc.$CLUSTER_DOMAIN" "$CLUSTER_DNS" 2>/dev/null)"
}
wait_for "DNS answers on $CLUSTER_DNS" 60 dns_answers || die "cluster DNS does not answer"
# and reverse lookups (etcd checks a peer's certificate by the PTR name of its address)
ptr=$(in_node 1 /bin/busybox nslookup 10.0.0.1 "$CLUSTER_DNS" 2>/dev/null || true)
grep -q "name = kubernetes\.default\.svc\.$CLUSTER_DOMAIN" <<<"$ptr" ||
  die "cluster DNS gives no PTR name for 10.0.0.1 (kubernetes.default.svc.$CLUSTER_DOMAIN expected): $ptr"
wait_for "default ServiceAccount" 60 $KC -n default get serviceaccount default || true

log "ready in $(( $(date +%s) - T0 ))s: $(echo $NODES | wc -w) nodes, DNS $CLUSTER_DNS (CoreDNS on $HOST_IP), logs in $LOGS"
echo "$KUBECONFIG_ADMIN"
