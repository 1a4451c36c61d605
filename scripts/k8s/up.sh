#!/usr/bin/env bash
# Starts a local, loopback-only Kubernetes control plane by hand (etcd + kube-apiserver, plus
# kube-controller-manager and kube-scheduler with QUORATE_K8S_EXTRA_BINS=
# "kube-controller-manager kube-scheduler") from the binaries of scripts/k8s/build-modules.sh, e.g. to
# run `quorate operator` against it. Prints the admin kubeconfig's path; down.sh stops it.
# Tests do not use this: the testkit starts its own apiserver per test binary (kube_apiserver.rs).
# State (etcd data, PKI, logs) in $QUORATE_K8S_STATE (default /tmp/quorate-k8s); needs openssl.
# Idempotent: components already running (PID recorded + alive) are left alone.
# No kubelet: Pods are created by controllers but stay Pending forever.
set -euo pipefail

HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s-1.37}
BIN=$HOME_DIR/bin
STATE=${QUORATE_K8S_STATE:-/tmp/quorate-k8s}
KUBECONFIG_OUT=$STATE/kubeconfig
ETCD=/usr/bin/etcd

ETCD_CLIENT_PORT=${QUORATE_K8S_ETCD_PORT:-23790}
ETCD_PEER_PORT=$((ETCD_CLIENT_PORT + 10))
API_PORT=${QUORATE_K8S_API_PORT:-6443}
CM_PORT=10257
SCHED_PORT=10259
# legacy plain-HTTP health ports (loopback only); `kubectl get componentstatuses` probes these
CM_HEALTH_PORT=10252
SCHED_HEALTH_PORT=10251
SVC_CIDR=10.0.0.0/24
SVC_API_IP=10.0.0.1

PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids
mkdir -p "$PKI" "$LOGS" "$PIDS" "$STATE/etcd"
chmod 700 "$STATE" "$PKI"

log() { echo "[quorate k8s up] $*" >&2; }

# ---- process helpers (PID files; we only ever look at PIDs we recorded) ----
is_running() { # name binary-path
  local f=$PIDS/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && [ -d /proc/$pid ] || return 1
  # guard against PID reuse: the recorded PID must still be our binary
  [ "$(readlink -f /proc/$pid/exe 2>/dev/null || true)" = "$(readlink -f "$2")" ]
}

port_busy() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

start_bg() { # name binary args...
  local name=$1 bin=$2; shift 2
  if is_running "$name" "$bin"; then
    log "$name already running (pid $(cat "$PIDS/$name.pid"))"
    return 0
  fi
  log "starting $name"
  setsid nohup "$bin" "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
}

wait_for() { # description timeout-seconds command...
  local what=$1 t=$2; shift 2
  local i
  for ((i = 0; i < t * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "timed out waiting for $what"; return 1
}

for b in kube-apiserver kubectl; do
  [ -x "$BIN/$b" ] || { log "missing $BIN/$b: run scripts/k8s/build-modules.sh"; exit 1; }
done
[ -x "$ETCD" ] || { log "missing $ETCD: run scripts/install-deps.sh"; exit 1; }
command -v openssl >/dev/null || { log "missing openssl: apt-get install openssl"; exit 1; }
# The controller-manager (default ServiceAccounts, garbage collection, ...) and the scheduler
# run only when built.
extras=""
for b in kube-controller-manager kube-scheduler; do if [ -x "$BIN/$b" ]; then extras="$extras $b"; fi; done
has() { case " $extras " in *" $1 "*) return 0 ;; esac; return 1; }
# The release decides a few flags: the plain-HTTP ports (--insecure-port, --address, --port) were
# removed in 1.24; 1.37 (scripts/k8s/build-modules.sh) runs without them.
K8S_MINOR=$("$BIN/kube-apiserver" --version 2>/dev/null | sed -n 's/^Kubernetes v1\.\([0-9]*\)\..*/\1/p')
[ -n "$K8S_MINOR" ] || { log "$BIN/kube-apiserver --version names no Kubernetes v1.x release"; exit 1; }
legacy_flags() { # flags only releases before 1.24 know: the plain-HTTP health ports
  [ "$K8S_MINOR" -lt 24 ] || return 0
  case $1 in
    kube-apiserver) echo --insecure-port=0 ;;
    kube-controller-manager) echo --address=127.0.0.1 --port=$CM_HEALTH_PORT ;;
    kube-scheduler) echo --address=127.0.0.1 --port=$SCHED_HEALTH_PORT ;;
  esac
}

# QUORATE_K8S_APISERVER_ENDPOINT_ROUTING=1 (set by the node kit, whose kube-proxies run
# in the nodes' network namespaces, not on this host): the apiserver reaches a webhook's Service
# through one of its endpoints (a pod IP, routed to its node) instead of the ClusterIP, which only
# a kube-proxy on this host could translate (unanswered here it leaves the host by the default
# route).
routing_flags() {
  [ "${QUORATE_K8S_APISERVER_ENDPOINT_ROUTING:-0}" = 1 ] && echo --enable-aggregator-routing=true
  return 0
}

# ---- PKI (generated once per state dir) ----
gen_pki() {
  local o="openssl"
  cd "$PKI"
  $o req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=local-kubernetes-ca" 2>/dev/null
  $o req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 3650 \
    -subj "/CN=local-front-proxy-ca" 2>/dev/null
  $o genrsa -out sa.key 2048 2>/dev/null
  $o rsa -in sa.key -pubout -out sa.pub 2>/dev/null

  sign() { # name subj ca extfile-content
    local n=$1 subj=$2 ca=$3 ext=$4
    $o req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "$subj" 2>/dev/null
    printf '%s\n' "$ext" > "$n.ext"
    $o x509 -req -in "$n.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial \
      -out "$n.crt" -days 3650 -extfile "$n.ext" 2>/dev/null
    rm -f "$n.csr" "$n.ext"
  }
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign apiserver "/CN=kube-apiserver" ca "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SVC_API_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=kubernetes-admin" ca "$client"
  sign controller-manager "/CN=system:kube-controller-manager" ca "$client"
  sign scheduler "/CN=system:kube-scheduler" ca "$client"
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" ca "$client"
  sign front-proxy-client "/CN=front-proxy-client" front-proxy-ca "$client"
  # static bearer token for the admin user (alternative to the client cert)
  echo "$(openssl rand -hex 16),admin-token-user,admin-token-uid,system:masters" > tokens.csv
  chmod 600 ./*.key tokens.csv
  touch .done
  cd - >/dev/null
}
[ -f "$PKI/.done" ] || { log "generating PKI in $PKI"; gen_pki; }

write_kubeconfig() { # file user cert key
  local f=$1 user=$2 crt=$3 key=$4
  local tmp; tmp=$(mktemp)
  cat > "$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$crt")
    client-key-data: $(base64 -w0 < "$key")
contexts:
- name: local
  context:
    cluster: local
    user: $user
    namespace: default
current-context: local
EOF
  chmod 600 "$tmp"; mv "$tmp" "$f"
}
write_kubeconfig "$KUBECONFIG_OUT" admin "$PKI/admin.crt" "$PKI/admin.key"
write_kubeconfig "$STATE/controller-manager.kubeconfig" system:kube-controller-manager "$PKI/controller-manager.crt" "$PKI/controller-manager.key"
write_kubeconfig "$STATE/scheduler.kubeconfig" system:kube-scheduler "$PKI/scheduler.crt" "$PKI/scheduler.key"

KC="$BIN/kubectl --kubeconfig $KUBECONFIG_OUT"

# ---- etcd ----
if ! is_running etcd "$ETCD"; then
  for p in $ETCD_CLIENT_PORT $ETCD_PEER_PORT; do
    port_busy $p && { log "port $p is already in use by something else"; exit 1; }
  done
fi
start_bg etcd "$ETCD" \
  --name k8s-local \
  --data-dir "$STATE/etcd" \
  --listen-client-urls http://127.0.0.1:$ETCD_CLIENT_PORT \
  --advertise-client-urls http://127.0.0.1:$ETCD_CLIENT_PORT \
  --listen-peer-urls http://127.0.0.1:$ETCD_PEER_PORT \
  --initial-advertise-peer-urls http://127.0.0.1:$ETCD_PEER_PORT \
  --initial-cluster k8s-local=http://127.0.0.1:$ETCD_PEER_PORT \
  --initial-cluster-state new \
  --initial-cluster-token k8s-local
wait_for "etcd health" 60 sh -c "curl -fsS http://127.0.0.1:$ETCD_CLIENT_PORT/health | grep -q '\"health\":\"true\"'"

# ---- kube-apiserver ----
if ! is_running kube-apiserver "$BIN/kube-apiserver"; then
  port_busy $API_PORT && { log "port $API_PORT is already in use by something else"; exit 1; }
fi
start_bg kube-apiserver "$BIN/kube-apiserver" \
  --advertise-address=127.0.0.1 \
  --bind-address=127.0.0.1 \
  --secure-port=$API_PORT \
  $(legacy_flags kube-apiserver) \
  $(routing_flags) \
  --endpoint-reconciler-type=none \
  --etcd-servers=http://127.0.0.1:$ETCD_CLIENT_PORT \
  --service-cluster-ip-range=$SVC_CIDR \
  --authorization-mode=RBAC \
  --allow-privileged=true \
  --client-ca-file="$PKI/ca.crt" \
  --tls-cert-file="$PKI/apiserver.crt" \
  --tls-private-key-file="$PKI/apiserver.key" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --token-auth-file="$PKI/tokens.csv" \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --api-audiences=https://kubernetes.default.svc.cluster.local \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-username-headers=X-Remote-User \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
  --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --profiling=false \
  --v=1
wait_for "kube-apiserver /readyz" 180 $KC get --raw /readyz

# ---- kube-controller-manager ----
if has kube-controller-manager; then
if ! is_running kube-controller-manager "$BIN/kube-controller-manager"; then
  port_busy $CM_PORT || port_busy $CM_HEALTH_PORT && { log "port $CM_PORT is already in use by something else"; exit 1; }
fi
start_bg kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig="$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port=$CM_PORT \
  $(legacy_flags kube-controller-manager) \
  --cert-dir="$STATE/controller-manager-certs" \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" \
  --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" \
  --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range=$SVC_CIDR \
  --controllers='*,bootstrapsigner,tokencleaner' \
  --profiling=false \
  --v=1
fi

# ---- kube-scheduler ----
if has kube-scheduler; then
if ! is_running kube-scheduler "$BIN/kube-scheduler"; then
  port_busy $SCHED_PORT || port_busy $SCHED_HEALTH_PORT && { log "port $SCHED_PORT is already in use by something else"; exit 1; }
fi
start_bg kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig="$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port=$SCHED_PORT \
  $(legacy_flags kube-scheduler) \
  --cert-dir="$STATE/scheduler-certs" \
  --leader-elect=false \
  --profiling=false \
  --v=1
fi

# ---- readiness ----
wait_for "kube-apiserver /readyz" 120 $KC get --raw /readyz
for n in $extras; do
  sleep 1
  b=$BIN/$n
  is_running $n "$b" || { log "$n exited; see $LOGS/$n.log"; tail -20 "$LOGS/$n.log" >&2; exit 1; }
done
# the controller-manager creates the 'default' ServiceAccount; wait for it (non-fatal)
has kube-controller-manager && { wait_for "default ServiceAccount" 60 $KC -n default get serviceaccount default || true; }

log "ready: $($KC get --raw /readyz)  (state: $STATE, logs: $LOGS)"
echo "$KUBECONFIG_OUT"
