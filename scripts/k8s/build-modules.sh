#!/usr/bin/env bash
# Builds the Kubernetes kit from Go modules: one multi-call binary of
# k8s.io/kubernetes (tools/kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy, kubectl; symlinks named after each), and the node's pieces from their own
# wrapper modules: containerd v2 with its runc shim and ctr (tools/containerd), crictl
# (tools/cri-tools) and CoreDNS (tools/coredns). runc and the CNI plugins are Debian's.
# Go from PATH (no toolchain switch), -trimpath, version variables set so `--version` tells the
# truth. Installs into ${QUORATE_K8S_HOME:-~/.cache/quorate/k8s-1.37}/bin, each binary built
# beside and renamed (never half-written). Idempotent: a piece whose installed binary reports the
# pinned version is skipped. QUORATE_K8S_PIECES limits the pieces (default: all). Prints the bin
# directory on success. Measured cold times: scripts/k8s-node/README.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s-1.37}
BIN=$HOME_DIR/bin
K8S_VERSION=v1.37.2
CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0
COREDNS_VERSION=1.15.0
PIECES=${QUORATE_K8S_PIECES:-kubernetes containerd crictl coredns}
log() { echo "[quorate k8s build-modules] $*" >&2; }
mkdir -p "$BIN"
# sudo's secure_path may leave out the Go toolchain
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { log "no go on PATH (Go >= 1.26 builds these modules)"; exit 1; }
export GOFLAGS=-trimpath GOCACHE=${QUORATE_K8S_GOCACHE:-$HOME_DIR/gocache} CGO_ENABLED=0
# Reports whether $1 --version (or $1 $2) prints $3. grep reads it all: with `grep -q` the
# binary can die of SIGPIPE after the match, and pipefail then says "no" (CoreDNS was rebuilt).
has_version() { [ -x "$1" ] && "$1" ${2:---version} 2>/dev/null | grep -F -- "$3" >/dev/null; }
timed() { local t0=$SECONDS; "$@"; log "$1 … took $((SECONDS - t0)) s"; }

build_kubernetes() {
  if has_version "$BIN/kubernetes" "kube-apiserver --version" "Kubernetes $K8S_VERSION"; then return; fi
  local v=$K8S_VERSION minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w -buildid="
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  log "building k8s.io/kubernetes $v (one multi-call binary)"
  (cd "$ROOT/tools/kubernetes" && go build -tags selinux,notest -ldflags "$ld" -o "$BIN/.kubernetes.tmp" .)
  mv -f "$BIN/.kubernetes.tmp" "$BIN/kubernetes"
  local n
  for n in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    ln -sfn kubernetes "$BIN/$n"
  done
}

# Builds the tool packages $2… of wrapper module tools/$1 with ldflags $LDX into $BIN, renamed
# into place only when all of them built.
build_tools() {
  local mod=$1 p; shift
  for p in "$@"; do
    (cd "$ROOT/tools/$mod" && go build -tags "${TAGS:-}" -ldflags "-s -w -buildid= ${LDX:-}" -o "$BIN/.${p##*/}.tmp" "$p")
  done
  for p in "$@"; do mv -f "$BIN/.${p##*/}.tmp" "$BIN/${p##*/}"; done
}

build_containerd() {
  if has_version "$BIN/containerd" --version " $CONTAINERD_VERSION"; then return; fi
  log "building containerd $CONTAINERD_VERSION, containerd-shim-runc-v2, ctr"
  local c=github.com/containerd/containerd/v2
  TAGS=no_btrfs,no_devmapper LDX="-X $c/version.Version=$CONTAINERD_VERSION -X $c/version.Package=$c" \
    build_tools containerd $c/cmd/containerd $c/cmd/containerd-shim-runc-v2 $c/cmd/ctr
}

build_crictl() {
  if has_version "$BIN/crictl" --version "$CRICTL_VERSION"; then return; fi
  log "building crictl $CRICTL_VERSION"
  LDX="-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    build_tools cri-tools sigs.k8s.io/cri-tools/cmd/crictl
}

build_coredns() {
  if has_version "$BIN/coredns" -version "CoreDNS-$COREDNS_VERSION"; then return; fi
  log "building CoreDNS $COREDNS_VERSION"
  build_tools coredns github.com/coredns/coredns
}

for piece in $PIECES; do
  case $piece in
    kubernetes | containerd | crictl | coredns) ;;
    *) log "unknown piece '$piece' (kubernetes, containerd, crictl, coredns)"; exit 2 ;;
  esac
  # One build of a piece at a time (e.g. install-deps.sh and a node kit build): the second
  # waits, then finds the piece installed.
  ( flock 9; timed "build_$piece" ) 9>"$HOME_DIR/.build-$piece.lock"
done
echo "$BIN"
