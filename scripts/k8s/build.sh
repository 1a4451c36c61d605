#!/usr/bin/env bash
# Builds a real upstream Kubernetes control plane, v1.20.2, for quorate's tests: kube-apiserver and
# kubectl (QUORATE_K8S_EXTRA_BINS="kube-controller-manager kube-scheduler" adds those cmd/<name>s of
# the same tree). Source: Debian bookworm's `kubernetes` source package; compiler: Go 1.15 from
# Debian bullseye (Go >= 1.18 builds it, but kube-apiserver then crashes on the first custom
# resource: the vendored modern-go/reflect2 of 1.20 does not support newer Go). Offline build
# (GOPROXY=off), everything under $QUORATE_K8S_HOME (default ~/.cache/quorate/k8s), binaries in
# $QUORATE_K8S_HOME/bin, which is printed on success. Idempotent: exits at once when the binaries
# are there. Cold: about 10 minutes on 2 cores. Needs apt access to a Debian mirror (and root or
# sudo) only for the first run. Adapted from shared/k8s-testenv/build.sh.
set -euo pipefail
HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s}
BIN=$HOME_DIR/bin
want="kube-apiserver kubectl ${QUORATE_K8S_EXTRA_BINS:-}"
missing() { local m="" b; for b in $want; do [ -x "$BIN/$b" ] || m="$m $b"; done; echo "$m"; }
[ -z "$(missing)" ] && { echo "$BIN"; exit 0; }
log() { echo "[quorate k8s build] $*" >&2; }
mkdir -p "$HOME_DIR" "$BIN"
# One build at a time (e.g. install-deps.sh and a manual run); the second waits, then finds the
# binaries and exits.
exec 9>"$HOME_DIR/.build.lock"
flock 9
todo=$(missing)
[ -z "$todo" ] && { echo "$BIN"; exit 0; }

sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# The Debian mirror this machine is configured with (first URI in its apt sources).
mirror=$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+)[a-z]+://[^[:space:]]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -v security | head -1 | grep -oE '[a-z]+://[^[:space:]]+' || true)
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
opts=""; [ -f "$keyring" ] && opts="[signed-by=$keyring] "
tmp_src=/etc/apt/sources.list.d/quorate-k8s-tmp.list
cleanup_src() {
  if [ -f "$tmp_src" ]; then
    $sudo rm -f "$tmp_src"
    $sudo apt-get update -qq >/dev/null 2>&1 || true
  fi
}
trap cleanup_src EXIT
with_source() { # apt source line; the temporary source is removed again afterwards
  [ -n "$mirror" ] || { log "no Debian mirror found in the apt sources"; exit 1; }
  echo "$1" | $sudo tee "$tmp_src" >/dev/null
  $sudo apt-get update -qq >/dev/null 2>&1 || true
}

GO=/usr/lib/go-1.15/bin/go
if [ ! -x "$GO" ]; then
  log "installing golang-1.15-go from Debian bullseye (temporary apt source)"
  with_source "deb $opts$mirror bullseye main"
  $sudo apt-get install -y -qq --no-install-recommends golang-1.15-go >/dev/null
  cleanup_src
fi
need=()
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v rsync >/dev/null || need+=(rsync)
command -v make >/dev/null || need+=(make)
if ((${#need[@]})); then $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; fi

SRC=$HOME_DIR/src
if [ ! -f "$SRC/.extracted" ]; then
  log "fetching Debian source package kubernetes (bookworm)"
  work=$HOME_DIR/debsrc; rm -rf "$work"; mkdir -p "$work"
  with_source "deb-src $opts$mirror bookworm main"
  (cd "$work" && apt-get source -qq --download-only kubernetes >/dev/null)
  cleanup_src
  rm -rf "$SRC"; mkdir -p "$SRC"
  tar -xzf "$work"/kubernetes_*.orig.tar.gz -C "$SRC" --strip-components=1
  rm -rf "$work"
  touch "$SRC/.extracted"
fi

export GOENV=off GOPROXY=off GOFLAGS= CGO_ENABLED=0 GOCACHE=$HOME_DIR/gocache PATH=/usr/lib/go-1.15/bin:$PATH
if [ ! -f "$SRC/.generated" ]; then
  log "generating code (make generated_files)"
  (cd "$SRC" && make generated_files >/dev/null) && touch "$SRC/.generated"
fi
GP=$SRC/_output/local/go
mkdir -p "$GP/src/k8s.io"
[ -L "$GP/src/k8s.io/kubernetes" ] || ln -s ../../../../.. "$GP/src/k8s.io/kubernetes"
cd "$GP/src/k8s.io/kubernetes"
export GO111MODULE=off GOPATH=$GP
PKG=k8s.io/kubernetes
LD="-s -w -buildid="
for p in client-go/pkg/version component-base/version; do
  LD="$LD -X $PKG/vendor/k8s.io/$p.gitMajor=1 -X $PKG/vendor/k8s.io/$p.gitMinor=20 -X $PKG/vendor/k8s.io/$p.gitVersion=v1.20.2 -X $PKG/vendor/k8s.io/$p.gitCommit=faecb196815e248d3ecfb03c680a4507229c2a56 -X $PKG/vendor/k8s.io/$p.gitTreeState=clean"
done
for n in $todo; do
  log "building $n"
  # Built beside, then renamed: an interrupted build never leaves a half-written binary behind.
  go build -tags selinux,notest -ldflags "$LD" -o "$BIN/.$n.tmp" ./cmd/$n
  mv -f "$BIN/.$n.tmp" "$BIN/$n"
done
echo "$BIN"
