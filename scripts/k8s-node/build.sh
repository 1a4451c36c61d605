#!/bin/bash
# Builds what the kit's up.sh needs into $QUORATE_K8S_HOME (default
# ~/.cache/quorate/k8s-1.37): Debian packages when missing (runc, CNI plugins, iptables,
# conntrack, socat, busybox-static, etcd-server, gcc, ...); Kubernetes v1.37.2, containerd v2,
# crictl and CoreDNS from their Go modules (../k8s/build-modules.sh); the pause image (pause.c
# of the same k8s.io/kubernetes module, static) and a busybox image (mkimage.sh).
# Idempotent: what exists at the pinned version is kept. Needs root. Prints $QUORATE_K8S_HOME.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "[quorate k8s-node build] $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
T0=$(date +%s)
STAMPS=$HOME_DIR/stamps
mkdir -p "$BIN" "$BASE_IMAGES" "$STAMPS"

PKGS="runc containernetworking-plugins iptables conntrack socat busybox-static etcd-server
      curl openssl iproute2 procps util-linux gcc libc6-dev"
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

PATH=$CALLER_PATH "$TESTENV/build-modules.sh" >/dev/null

# pause: build/pause/linux/pause.c of the pinned k8s.io/kubernetes module
K8S_DIR=$(cd "$KIT/../../tools/kubernetes" && PATH=$CALLER_PATH:/usr/local/go/bin go list -m -f '{{.Dir}}' k8s.io/kubernetes)
PAUSE_C=$K8S_DIR/build/pause/linux/pause.c
PAUSE_BIN=$HOME_DIR/pause
[ -f "$PAUSE_C" ] || die "no $PAUSE_C"
want=$(sha256sum < "$PAUSE_C" | cut -d' ' -f1)
if [ ! -x "$PAUSE_BIN" ] || [ "$(cat "$STAMPS/pause" 2>/dev/null)" != "$want" ]; then
  log "compiling pause"
  gcc -Os -Wall -Werror -static -DVERSION=v3.10-quorate -o "$PAUSE_BIN.tmp" "$PAUSE_C"
  strip "$PAUSE_BIN.tmp"; mv "$PAUSE_BIN.tmp" "$PAUSE_BIN"
  echo "$want" > "$STAMPS/pause"
fi

make_image() { # name ref "input files" entrypoint cmd; the rootfs comes from image_<name>
  local name=$1 ref=$2 inputs=$3 ep=$4 cmd=$5 want r
  # shellcheck disable=SC2086
  want=$( { echo "$ref $ep $cmd"; cat "$KIT/mkimage.sh" $inputs; } | sha256sum | cut -d' ' -f1)
  if [ -f "$BASE_IMAGES/$name.tar" ] && [ "$(cat "$STAMPS/image-$name" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "making image $ref"
  r=$(mktemp -d)
  "image_$name" "$r"
  "$KIT/mkimage.sh" "$r" "$ref" "$BASE_IMAGES/$name.tar" "$ep" "$cmd" >/dev/null
  rm -rf "$r"
  echo "$want" > "$STAMPS/image-$name"
}
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
make_image pause "$PAUSE_IMAGE" "$PAUSE_BIN" '["/pause"]' null
make_image busybox k8s.local/busybox:1.35 /bin/busybox null '["sh"]'

log "done in $(( $(date +%s) - T0 ))s: binaries in $BIN, images in $BASE_IMAGES"
echo "$HOME_DIR"
