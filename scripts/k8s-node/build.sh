#!/bin/bash
# build.sh: build everything up.sh needs, into $QUORATE_K8S_HOME (default ~/.cache/quorate/k8s,
# the project's Kubernetes build cache, shared with scripts/k8s/):
#   - Debian packages, installed with apt when missing: containerd, runc,
#     containernetworking-plugins, iptables, conntrack, socat, busybox-static, etcd-server, ...
#   - bin/: kube-apiserver and kubectl (../k8s/build.sh), plus kube-controller-manager,
#     kube-scheduler, kubelet and kube-proxy from the same v1.20.2 tree (QUORATE_K8S_EXTRA_BINS),
#     and kube-dns-lite (dns/) and cri-lite (cri-lite/), compiled inside that tree against its
#     vendored libraries
#   - images/: pause.tar (k8s.local/pause:3.4, the tree's build/pause/linux/pause.c, static),
#     busybox.tar (k8s.local/busybox:1.35, Debian's busybox-static) and
#     kube-dns-lite.tar (k8s.local/kube-dns-lite:0.1), made with mkimage.sh
# Idempotent: only what is missing or whose sources changed is built. Cold: about 15 minutes on
# 2 cores (the six Kubernetes binaries; Go 1.15 and the source package from apt) plus package
# downloads; then seconds. Needs root. Adapted from shared/k8s-node/build.sh.
set -euo pipefail
# The current kit (Kubernetes v1.37 from Go modules, three nodes, current/) unless QUORATE_K8S_KIT=v1.20.
if [ "${QUORATE_K8S_KIT:-current}" = current ]; then exec "$(dirname "${BASH_SOURCE[0]}")/current/build.sh" "$@"; fi
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOME_DIR=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s}
export QUORATE_K8S_HOME=$HOME_DIR
BIN=$HOME_DIR/bin
SRC=$HOME_DIR/src
IMAGES=$HOME_DIR/images
STAMPS=$HOME_DIR/stamps
log() { echo "[quorate k8s-node build] $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
T0=$(date +%s)
mkdir -p "$BIN" "$IMAGES" "$STAMPS"

# ---- 1. Debian packages ----
PKGS="containerd runc containernetworking-plugins iptables conntrack socat busybox-static etcd-server
      curl openssl iproute2 procps gcc libc6-dev"
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing from apt: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || log "apt-get update failed; trying the install anyway"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- 2. Kubernetes binaries (control plane + kubelet + kube-proxy) ----
QUORATE_K8S_EXTRA_BINS="kube-controller-manager kube-scheduler kubelet kube-proxy ${QUORATE_K8S_EXTRA_BINS:-}" \
  "$KIT/../k8s/build.sh" >/dev/null

# ---- 3. our Go programs, compiled inside the same tree (GOPATH mode, vendored deps, offline) ----
GP=$SRC/_output/local/go
go_build() { # name source-dir: go build <source-dir>/*.go into $BIN/<name>
  local name=$1 dir=$2 want
  want=$(cat "$dir"/*.go "$SRC/vendor/modules.txt" 2>/dev/null | sha256sum | cut -d' ' -f1)
  if [ -x "$BIN/$name" ] && [ "$(cat "$STAMPS/$name" 2>/dev/null)" = "$want" ]; then return 0; fi
  [ -f "$SRC/vendor/modules.txt" ] || die "no Kubernetes source tree in $SRC (delete $BIN/kubelet and run again)"
  [ -x /usr/lib/go-1.15/bin/go ] || die "no Go 1.15 (delete $BIN/kubelet and run again)"
  log "building $name"
  mkdir -p "$GP/src/k8s.io"
  [ -L "$GP/src/k8s.io/kubernetes" ] || ln -s ../../../../.. "$GP/src/k8s.io/kubernetes"
  rm -rf "$SRC/_output/k8s-node/$name"; mkdir -p "$SRC/_output/k8s-node/$name"
  cp "$dir"/*.go "$SRC/_output/k8s-node/$name/"
  ( cd "$GP/src/k8s.io/kubernetes"
    export HOME=${HOME:-/root} GOENV=off GOPROXY=off GOFLAGS= GO111MODULE=off GOPATH=$GP CGO_ENABLED=0 \
           GOCACHE=$HOME_DIR/gocache PATH=/usr/lib/go-1.15/bin:$PATH
    go build -ldflags "-s -w -buildid=" -o "$BIN/$name.tmp" "./_output/k8s-node/$name" )
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "$want" > "$STAMPS/$name"
}
go_build kube-dns-lite "$KIT/dns"
go_build cri-lite "$KIT/cri-lite"

# ---- 4. base images ----
# make_image name ref "input files" entrypoint cmd -- rootfs is built by the function image_<name>
make_image() {
  local name=$1 ref=$2 inputs=$3 ep=$4 cmd=$5 want r
  # shellcheck disable=SC2086
  want=$( { echo "$ref $ep $cmd"; cat "$KIT/mkimage.sh" $inputs; } | sha256sum | cut -d' ' -f1)
  if [ -f "$IMAGES/$name.tar" ] && [ "$(cat "$STAMPS/image-$name" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "making image $ref"
  r=$(mktemp -d)
  "image_${name//-/_}" "$r"
  "$KIT/mkimage.sh" "$r" "$ref" "$IMAGES/$name.tar" "$ep" "$cmd" >/dev/null
  rm -rf "$r"
  echo "$want" > "$STAMPS/image-$name"
}
PAUSE_C=$SRC/build/pause/linux/pause.c
PAUSE_BIN=$HOME_DIR/pause
pause_want=$(cat "$PAUSE_C" 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ ! -x "$PAUSE_BIN" ] || [ "$(cat "$STAMPS/pause" 2>/dev/null)" != "$pause_want" ]; then
  [ -f "$PAUSE_C" ] || die "no $PAUSE_C (delete $BIN/kubelet and run again)"
  log "compiling pause"
  gcc -Os -Wall -Werror -static -DVERSION=v3.4-k8s-node -o "$PAUSE_BIN.tmp" "$PAUSE_C"
  strip "$PAUSE_BIN.tmp"; mv "$PAUSE_BIN.tmp" "$PAUSE_BIN"
  echo "$pause_want" > "$STAMPS/pause"
fi
image_pause() { install -m 0755 "$PAUSE_BIN" "$1/pause"; }
image_busybox() { # busybox-static + applet links + minimal /etc
  local r=$1 a
  mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,proc,sys,dev,var/run,home}
  chmod 1777 "$r/tmp"
  install -m 0755 /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list-full); do
    [ "$a" = bin/busybox ] && continue
    mkdir -p "$r/$(dirname "$a")"; ln -sf /bin/busybox "$r/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
}
image_kube_dns_lite() { mkdir -p "$1/etc" "$1/tmp"; install -m 0755 "$BIN/kube-dns-lite" "$1/kube-dns-lite"; }
make_image pause k8s.local/pause:3.4 "$PAUSE_BIN" '["/pause"]' null
make_image busybox k8s.local/busybox:1.35 /bin/busybox null '["sh"]'
make_image kube-dns-lite k8s.local/kube-dns-lite:0.1 "$BIN/kube-dns-lite" '["/kube-dns-lite"]' null

log "done in $(( $(date +%s) - T0 ))s: binaries in $BIN, images in $IMAGES"
echo "$HOME_DIR"
