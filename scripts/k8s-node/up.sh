#!/bin/bash
# Start a real single-node Kubernetes v1.20.2 on this machine:
#   the loopback control plane of ../k8s/up.sh (etcd, kube-apiserver on 127.0.0.1:6443,
#   controller-manager, scheduler), then a node `local-node`: containerd + runc + CNI bridge,
#   kubelet, kube-proxy (iptables), a TCP forward so pods reach the API server, cluster DNS.
# Waits until the node is Ready and DNS answers, imports the base images and every image
# tarball in $QUORATE_K8S_NODE_IMAGES, and prints the admin kubeconfig path as its last line.
# Idempotent: what already runs (recorded PID, same binary, same configuration) is left alone.
# Needs root and the output of build.sh. Undo everything with down.sh. See docs/development/testing.md.
# Adapted from shared/k8s-node/up.sh (the project's control plane and build cache).
set -euo pipefail
# The current kit (Kubernetes v1.37 from Go modules, three nodes, current/) unless QUORATE_K8S_KIT=v1.20.
if [ "${QUORATE_K8S_KIT:-current}" = current ]; then exec "$(dirname "${BASH_SOURCE[0]}")/current/up.sh" "$@"; fi
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "[quorate k8s-node up] $*" >&2; }
die() { log "$*"; exit 1; }
T0=$(date +%s)
trap 'rc=$?; [ $rc -eq 0 ] || log "FAILED (exit $rc). Logs: $LOGS, $CP_STATE/logs. down.sh undoes what was started."' EXIT

# ---- prerequisites ----
[ "$(id -u)" = 0 ] || die "must run as root"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl cri-lite; do
  [ -x "$BIN/$b" ] || die "missing $BIN/$b: run build.sh first (same QUORATE_K8S_HOME)"
done
for i in pause busybox kube-dns-lite; do
  [ -f "$BASE_IMAGES/$i.tar" ] || die "missing $BASE_IMAGES/$i.tar: run build.sh first"
done
for b in $CONTAINERD $SHIM /usr/sbin/runc /usr/bin/ctr $SOCAT /usr/lib/cni/bridge /usr/lib/cni/host-local \
         /usr/lib/cni/loopback /usr/lib/cni/portmap /usr/sbin/iptables /usr/sbin/conntrack /bin/busybox; do
  [ -x "$b" ] || die "missing $b: run build.sh first"
done
if [ -n "${QUORATE_K8S_NODE_IMAGES:-}" ] && [ ! -d "$QUORATE_K8S_NODE_IMAGES" ]; then
  die "QUORATE_K8S_NODE_IMAGES=$QUORATE_K8S_NODE_IMAGES is not a directory"
fi

# ---- node state dir; remember how the host looked before we touched it ----
if [ ! -f "$MARKER" ]; then
  if [ -d "$NS" ] && [ -n "$(ls -A "$NS")" ]; then
    die "$NS exists, is not empty and is not a k8s-node state dir (set QUORATE_K8S_NODE_STATE)"
  fi
  mkdir -p "$NS"; touch "$MARKER"
fi
[ $(( ${#SOCK} + 6 )) -lt 108 ] || die "QUORATE_K8S_NODE_STATE path too long for a unix socket: $SOCK"
if [ -n "$UP_HOME" ] && { [ "$UP_HOME" != "$HOME_DIR" ] || [ "$UP_CP_STATE" != "$CP_STATE" ]; }; then
  die "the node in $NS runs with QUORATE_K8S_HOME=$UP_HOME QUORATE_K8S_STATE=$UP_CP_STATE; run down.sh first"
fi
printf 'UP_HOME=%q\nUP_CP_STATE=%q\n' "$HOME_DIR" "$CP_STATE" > "$NS/env"
mkdir -p "$PIDS" "$LOGS" "$NS/pki" "$CTRD" "$NS/cni/net.d" "$NS/cni/ipam" "$NS/kubelet/root" \
  "$NS/kubelet/pki" "$NS/kubelet/volume-plugins"
chmod 700 "$NS/pki"
if [ ! -f "$ORIG/done" ]; then
  mkdir -p "$ORIG"
  for s in $SYSCTLS; do v=$(sysctl -n "$s" 2>/dev/null) && echo "$s=$v"; done > "$ORIG/sysctl"
  for p in $HOST_PATHS; do [ -e "$p" ] || echo "$p"; done > "$ORIG/absent-paths"
  if mountpoint -q /run/netns 2>/dev/null; then echo yes; else echo no; fi > "$ORIG/netns-mountpoint"
  ls -A /run/netns 2>/dev/null > "$ORIG/netns-entries" || true
  { ls -A /var/log/pods 2>/dev/null | sed 's|^|/var/log/pods/|'
    ls -A /var/log/containers 2>/dev/null | sed 's|^|/var/log/containers/|'; } > "$ORIG/log-entries" || true
  for c in $CGROUP_NAMES; do find /sys/fs/cgroup/*/"$c" -type d 2>/dev/null || true; done > "$ORIG/cgroups"
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

# start_bg NAME "files that are part of its configuration" EXE ARGS...
# (re)starts NAME unless its recorded PID still runs EXE with the same configuration
start_bg() {
  local name=$1 files=$2 exe=$3 sig; shift 3
  # shellcheck disable=SC2086
  sig=$( { echo "$exe $*"; cat $files 2>/dev/null; } | sha256sum | cut -d' ' -f1)
  if is_ours "$name" "$exe"; then
    if [ "$(cat "$PIDS/$name.sig" 2>/dev/null)" = "$sig" ]; then
      log "$name already running (pid $(pid_of "$name"))"; return 0
    fi
    log "$name: configuration changed, restarting"; stop_one "$name" "$exe"
  fi
  log "starting $name"
  setsid nohup "$exe" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$PIDS/$name.pid"; echo "$sig" > "$PIDS/$name.sig"
}
port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
check_port() { # name port: the port must be free unless NAME (ours) already runs
  is_ours "$1" "$3" && return 0
  if port_busy "$2"; then die "port $2 (for $1) is already in use by something else"; fi
}

# ---- bridge (pre-created so kubelet and kube-proxy can bind to the node IP) ----
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  log "creating bridge $BRIDGE $NODE_IP/24"
  ip link add "$BRIDGE" type bridge
fi
[[ "$(ip -o -4 addr show dev "$BRIDGE")" == *" inet $NODE_IP/24 "* ]] || ip addr add "$NODE_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up

# The apiserver dials the kubelet by node name (logs, exec, port-forward): make it resolve.
if ! grep -qF "$HOSTS_MARK" /etc/hosts; then
  resolved=$(getent hosts "$NODE_NAME" | awk '{print $1; exit}' || true)
  case "$resolved" in
    "") echo "$NODE_IP $NODE_NAME $HOSTS_MARK" >> /etc/hosts ;;
    "$NODE_IP") ;;
    *) die "$NODE_NAME already resolves to $resolved (not $NODE_IP); check /etc/hosts" ;;
  esac
fi

# ---- containerd ----
cat > "$CTRD/config.toml.tmp" <<EOF
# generated by k8s-node/up.sh
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
[grpc]
  address = "$SOCK"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$CTRD/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    disable_apparmor = true
    disable_tcp_service = true
    # no CAP_SYS_RESOURCE here: runc cannot set the negative oom_score_adj that pause gets
    # ("can't get final child's PID from pipe: EOF"); clamp to containerd's own value
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$NS/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$CTRD/runc"
EOF
mv "$CTRD/config.toml.tmp" "$CTRD/config.toml"
cat > "$NS/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NS/cni/ipam",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$NODE_IP" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
# (a restart of containerd leaves running containers alone: their shims survive)
start_bg containerd "$CTRD/config.toml" $CONTAINERD --config "$CTRD/config.toml"
CTR="ctr --address $SOCK -n k8s.io"
wait_for "containerd" 60 $CTR version || { tail -20 "$LOGS/containerd.log" >&2; exit 1; }

# ---- images: base images + $QUORATE_K8S_NODE_IMAGES/*.tar (no registry) ----
# A tarball is imported again when it changed (size, mtime) or its image is gone.
touch "$NS/imported"
have=$($CTR images ls -q)
imported=0
for f in "$BASE_IMAGES"/pause.tar "$BASE_IMAGES"/busybox.tar "$BASE_IMAGES"/kube-dns-lite.tar \
         ${QUORATE_K8S_NODE_IMAGES:+"$QUORATE_K8S_NODE_IMAGES"/*.tar "$QUORATE_K8S_NODE_IMAGES"/*.tar.gz "$QUORATE_K8S_NODE_IMAGES"/*.tgz}; do
  [ -f "$f" ] || continue
  f=$(readlink -f "$f")
  sig="$(stat -c '%s %Y' "$f") $f"
  ref=$(tar -xOf "$f" manifest.json 2>/dev/null | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p' || true)
  if grep -qxF "$sig" "$NS/imported" && { [ -z "$ref" ] || grep -qxF "$ref" <<<"$have"; }; then continue; fi
  log "importing $f${ref:+ ($ref)}"
  $CTR images import "$f" >/dev/null || die "ctr images import $f failed"
  awk -v f="$f" '{ p = $0; sub(/^[0-9]+ [0-9]+ /, "", p) } p != f' "$NS/imported" > "$NS/imported.tmp"
  echo "$sig" >> "$NS/imported.tmp"; mv "$NS/imported.tmp" "$NS/imported"
  imported=$((imported + 1))
done
[ $imported -eq 0 ] || log "imported $imported image tarball(s)"

# ---- node credentials: client certificates signed by the control plane's CA ----
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
sign_client kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
sign_client kube-proxy "/CN=system:kube-proxy"
write_kubeconfig() { # file user cert key
  local f=$1 user=$2 crt=$3 key=$4
  cat > "$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $API_URL
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
write_kubeconfig "$NS/kubelet.kubeconfig" "system:node:$NODE_NAME" "$NS/pki/kubelet.crt" "$NS/pki/kubelet.key"
write_kubeconfig "$NS/kube-proxy.kubeconfig" system:kube-proxy "$NS/pki/kube-proxy.crt" "$NS/pki/kube-proxy.key"

# The control plane authorizes with RBAC only (no Node authorizer): give the node group the
# system:node role (system:node-proxier is bound to the user system:kube-proxy by default).
$KC apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "k8s-node:nodes"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}
EOF

# ---- kubelet ----
cat > "$NS/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
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
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$CLUSTER_DNS]
resolvConf: /etc/resolv.conf
failSwapOn: true
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
# The kit's images are imported, not pullable: image GC must never delete them (a full disk
# once left every later scenario in ImagePullBackOff). 100 never triggers.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 100
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
EOF
check_port kubelet 10250 "$BIN/kubelet"
start_bg kubelet "$NS/kubelet/config.yaml $NS/kubelet.kubeconfig $CA" "$BIN/kubelet" \
  --config="$NS/kubelet/config.yaml" \
  --kubeconfig="$NS/kubelet.kubeconfig" \
  --container-runtime=remote \
  --container-runtime-endpoint="unix://$SOCK" \
  --pod-infra-container-image=$PAUSE_IMAGE \
  --root-dir="$NS/kubelet/root" \
  --cert-dir="$NS/kubelet/pki" \
  --volume-plugin-dir="$NS/kubelet/volume-plugins" \
  --hostname-override=$NODE_NAME \
  --node-ip=$NODE_IP \
  --v=1
node_ready() {
  [ "$($KC get node $NODE_NAME -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
wait_for "node $NODE_NAME Ready" 180 node_ready || { tail -30 "$LOGS/kubelet.log" >&2; exit 1; }
log "node $NODE_NAME is Ready"

# ---- kube-proxy ----
check_port kube-proxy 10256 "$BIN/kube-proxy"
start_bg kube-proxy "$NS/kube-proxy.kubeconfig" "$BIN/kube-proxy" \
  --kubeconfig="$NS/kube-proxy.kubeconfig" \
  --hostname-override=$NODE_NAME \
  --bind-address=$NODE_IP \
  --healthz-bind-address=127.0.0.1:10256 \
  --metrics-bind-address=127.0.0.1:10249 \
  --cluster-cidr=$POD_CIDR \
  --proxy-mode=iptables \
  --nodeport-addresses=$NODE_IP/32 \
  --conntrack-max-per-core=0 \
  --conntrack-tcp-timeout-established=0 \
  --conntrack-tcp-timeout-close-wait=0 \
  --v=1
wait_for "kube-proxy healthz" 60 curl -fsS http://127.0.0.1:10256/healthz || { tail -20 "$LOGS/kube-proxy.log" >&2; exit 1; }

# ---- API access for pods ----
# kube-apiserver listens on 127.0.0.1 only and runs with --endpoint-reconciler-type=none, so
# the `kubernetes` Service (10.0.0.1:443) has no endpoints. Forward $NODE_IP:$API_FWD_PORT to it
# (plain TCP, TLS passes through; the serving cert has IP SAN 10.0.0.1 and kubernetes.default.svc)
# and point the Service there, so in-cluster clients work.
check_port apiserver-proxy $API_FWD_PORT $SOCAT
start_bg apiserver-proxy "" $SOCAT TCP-LISTEN:$API_FWD_PORT,bind=$NODE_IP,reuseaddr,fork TCP:$API_HOSTPORT
wait_for "API forward on $NODE_IP:$API_FWD_PORT" 30 curl -ksS -o /dev/null "https://$NODE_IP:$API_FWD_PORT/" \
  || { tail -5 "$LOGS/apiserver-proxy.log" >&2; exit 1; }
$KC apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Endpoints
metadata: {name: kubernetes, namespace: default}
subsets:
- addresses: [{ip: $NODE_IP}]
  ports: [{name: https, port: $API_FWD_PORT, protocol: TCP}]
EOF

# ---- cluster DNS (kube-dns-lite) ----
sed -e "s|__NODE_IP__|$NODE_IP|g" -e "s|__CLUSTER_DNS__|$CLUSTER_DNS|g" \
    -e "s|__CLUSTER_DOMAIN__|$CLUSTER_DOMAIN|g" -e "s|__IMAGE__|$DNS_IMAGE|g" \
    "$KIT/dns/kube-dns-lite.yaml" | $KC apply -f - >/dev/null
$KC -n kube-system rollout status deploy/kube-dns-lite --timeout=180s >/dev/null \
  || { $KC -n kube-system get pods -o wide >&2; die "cluster DNS did not become ready"; }
dns_answers() {
  grep -q '10\.0\.0\.1$' <<<"$(/bin/busybox nslookup "kubernetes.default.svc.$CLUSTER_DOMAIN" "$CLUSTER_DNS" 2>/dev/null)"
}
wait_for "DNS answers on $CLUSTER_DNS" 60 dns_answers || die "cluster DNS does not answer"

# Pods cannot be created in a namespace before its ServiceAccount has a token (v1.20).
sa_token() { [ -n "$($KC -n default get serviceaccount default -o jsonpath='{.secrets[0].name}' 2>/dev/null)" ]; }
wait_for "default ServiceAccount token" 60 sa_token || true

log "ready in $(( $(date +%s) - T0 ))s: node $NODE_NAME ($NODE_IP), pods on $BRIDGE $POD_CIDR, DNS $CLUSTER_DNS, logs in $LOGS"
echo "$KUBECONFIG_ADMIN"
