#!/usr/bin/env bash
# Builds `quorate` as one fully static binary (target x86_64-unknown-linux-musl: musl libc
# linked in, rustls with aws-lc for TLS, no OpenSSL) and checks it: no dynamic section, no
# interpreter, `quorate --version`, and a one-member local cluster up, healthy and down again
# with it. Prints the binary's path as the last line.
#
#   scripts/static.sh                       # release profile (what a release ships)
#   QUORATE_STATIC_PROFILE=quickstart scripts/static.sh   # unoptimised: a quicker check
#
# Needs the rustup target (`rustup target add x86_64-unknown-linux-musl`) and musl-gcc
# (Debian's musl-tools; aws-lc's C code is compiled with it); both are installed when missing.
# Build output goes to $CARGO_TARGET_DIR (default ~/.cache/quorate/target).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=x86_64-unknown-linux-musl
PROFILE=${QUORATE_STATIC_PROFILE:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/quorate/target}
log() { echo "[quorate static] $*" >&2; }
die() { log "$*"; exit 1; }

if ! command -v musl-gcc >/dev/null; then
  log "installing musl-tools (musl-gcc) from Debian"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends musl-tools >/dev/null
fi
rustup target list --installed 2>/dev/null | grep -qx "$TARGET" || rustup target add "$TARGET" >&2

log "cargo build --profile $PROFILE --target $TARGET -p quorate"
(cd "$ROOT" && CC_x86_64_unknown_linux_musl=musl-gcc \
  cargo build --locked --profile "$PROFILE" --target "$TARGET" -p quorate >&2)
dir=$PROFILE; [ "$dir" != dev ] || dir=debug
BIN=$CARGO_TARGET_DIR/$TARGET/$dir/quorate

# Static: no program interpreter and no shared libraries needed. grep reads all of readelf's
# output (not `grep -q`): under pipefail a readelf killed by SIGPIPE after the match would turn
# a found header into "not found".
if readelf -l "$BIN" | grep 'INTERP' >/dev/null; then die "$BIN asks for a program interpreter: not static"; fi
if readelf -d "$BIN" | grep 'NEEDED' >/dev/null; then
  die "$BIN needs shared libraries: $(readelf -d "$BIN" | grep NEEDED | tr -s ' ' | tr '\n' ';')"
fi
"$BIN" --version >&2

# A one-member local cluster with the static binary: up, healthy, down.
state=$(mktemp -d)
cleanup() { "$BIN" --state-dir "$state" down static-check >/dev/null 2>&1 || true; rm -rf "$state"; }
trap cleanup EXIT
cat >"$state/etcd.yaml" <<'EOF'
apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: static-check
spec:
  replicas: 1
  labels:
    app: static-check
  etcd: {}
  backup: {}
EOF
"$BIN" --state-dir "$state" up -d -f "$state/etcd.yaml" --timeout 60s >&2 ||
  die "the static binary did not start a one-member local cluster"
"$BIN" --state-dir "$state" members static-check >&2
"$BIN" --state-dir "$state" down static-check >&2
log "static, and ran a local cluster: $BIN ($(du -h "$BIN" | cut -f1))"
echo "$BIN"
