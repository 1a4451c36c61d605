#!/usr/bin/env bash
# image.sh: the quorate image — `quorate` (operator, agent, CLI) plus Debian's etcd and etcdctl
# (etcd-server/etcd-client 3.4 in /usr/bin) and etcd 3.5, 3.6 and 3.7 built from the Go modules
# pinned in tools/etcd/ (scripts/install-etcd.sh, in /usr/lib/quorate/etcd-X.Y), run as
# user 65532, ENTRYPOINT ["quorate"]. One script, two ways:
#
#   scripts/image.sh [--out FILE] [--ref IMAGE]
#       No container engine, no registry: builds `quorate` in release mode (the cargo profile
#       QUORATE_IMAGE_PROFILE names instead, if set: CI's end-to-end run uses `quickstart`, which
#       a cold machine builds in a third of the time), lays out a root
#       filesystem (/usr/local/bin/quorate, /usr/bin/etcd, /usr/bin/etcdctl and every library
#       they load, /tmp, /etc/passwd and /etc/group with user 65532, CA certificates) and packs
#       it with scripts/k8s-node/mkimage.sh into a one-layer image tarball (`docker save`
#       format: `ctr images import`, `docker load`, `kind load image-archive` take it).
#       Default ref k8s.local/quorate:<version>, default file
#       ${QUORATE_IMAGE_DIR:-~/.cache/quorate/images}/quorate-<version>.tar. Needs cargo and
#       Debian's etcd-server and etcd-client installed on this machine (apt-get install
#       etcd-server etcd-client ca-certificates); not root.
#
#   scripts/image.sh --engine [docker|podman|buildah] [--ref IMAGE]
#       Builds the Containerfile with that engine (the first one found when not named): the same
#       image, compiled in rust:1.95-bookworm and based on debian:bookworm-slim. Default ref
#       quorate:<version>, the name the operator gives the etcd pods unless IMAGEVECTOR_OVERWRITE
#       says otherwise.
#
# The last line on stdout is the tarball's path (tarball mode) or the image ref (engine mode).
# <version> is the workspace version (Cargo.toml), the one `quorate --version` prints.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "[quorate image] $*" >&2; }
die() { log "$*"; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

mode=tarball engine="" ref="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) mode=engine
      case "${2:-}" in docker | podman | buildah) engine=$2; shift ;; esac ;;
    --engine=*) mode=engine engine=${1#--engine=} ;;
    --ref) ref=${2:?--ref needs a value}; shift ;;
    --out) out=${2:?--out needs a value}; shift ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
  shift
done

version=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 } p && /^version *=/ { gsub(/[" ]/, "", $0); sub(/^version=/, ""); print; exit }' "$ROOT/Cargo.toml")
[ -n "$version" ] || die "no [workspace.package] version in $ROOT/Cargo.toml"
T0=$(date +%s)

if [ "$mode" = engine ]; then
  ref=${ref:-quorate:$version}
  if [ -z "$engine" ]; then
    for e in docker podman buildah; do command -v "$e" >/dev/null && { engine=$e; break; }; done
    [ -n "$engine" ] || die "no container engine (docker, podman, buildah) found; without one, run scripts/image.sh without --engine for an image tarball"
  fi
  command -v "$engine" >/dev/null || die "$engine is not installed"
  log "building $ref from Containerfile with $engine"
  case "$engine" in
    buildah) buildah bud -t "$ref" -f "$ROOT/Containerfile" "$ROOT" >&2 ;;
    *) "$engine" build -t "$ref" -f "$ROOT/Containerfile" "$ROOT" >&2 ;;
  esac
  log "done in $(( $(date +%s) - T0 ))s"
  echo "$ref"
  exit 0
fi

# ---- tarball: no engine ----
ref=${ref:-k8s.local/quorate:$version}
out=${out:-${QUORATE_IMAGE_DIR:-$HOME/.cache/quorate/images}/quorate-$version.tar}
mkdir -p "$(dirname "$out")"
for f in /usr/bin/etcd /usr/bin/etcdctl /etc/ssl/certs/ca-certificates.crt; do
  [ -e "$f" ] || die "missing $f: apt-get install etcd-server etcd-client ca-certificates"
done
command -v cargo >/dev/null || die "no cargo on PATH"
# etcd 3.5, 3.6 and 3.7 beside Debian's 3.4, where quorate looks for them
# (/usr/lib/quorate/etcd-X.Y), built once into ~/.cache/quorate/etcd-X.Y.
ETCD_MINORS=(3.5 3.6 3.7)
bash "$ROOT/scripts/install-etcd.sh" "${ETCD_MINORS[@]}"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/quorate/target}
profile=${QUORATE_IMAGE_PROFILE:-release}
log "cargo build --profile $profile -p quorate (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
(cd "$ROOT" && cargo build --profile "$profile" -p quorate >&2)
# cargo's output directory is named after the profile, except `dev`'s
QUORATE=$CARGO_TARGET_DIR/$([ "$profile" = dev ] && echo debug || echo "$profile")/quorate
got=$("$QUORATE" --version | awk '{ print $NF }')
[ "$got" = "$version" ] || die "$QUORATE --version says $got, Cargo.toml says $version"

r=$(mktemp -d)
trap 'rm -rf "$r"' EXIT
mkdir -p "$r"/usr/local/bin "$r"/usr/bin "$r"/etc/ssl/certs "$r"/tmp "$r"/var/lib/quorate \
  "$r"/var/etcd/data "$r"/proc "$r"/sys "$r"/dev
chmod 1777 "$r/tmp"
# The image's files all belong to root (mkimage.sh); the home directory is writable like /tmp so
# user 65532 can use it as in the Containerfile's image.
chmod 1777 "$r/var/lib/quorate"
install -m 0755 "$QUORATE" "$r/usr/local/bin/quorate"
install -m 0755 "$(readlink -f /usr/bin/etcd)" "$r/usr/bin/etcd"
install -m 0755 "$(readlink -f /usr/bin/etcdctl)" "$r/usr/bin/etcdctl"
for minor in "${ETCD_MINORS[@]}"; do
  var="QUORATE_ETCD_${minor/./_}_DIR"
  src="${!var:-$HOME/.cache/quorate/etcd-$minor}"
  mkdir -p "$r/usr/lib/quorate/etcd-$minor"
  for b in etcd etcdctl etcdutl; do install -m 0755 "$src/$b" "$r/usr/lib/quorate/etcd-$minor/$b"; done
done
# every shared library and the loader, at the paths the binaries ask for
for b in "$r/usr/local/bin/quorate" "$r/usr/bin/etcd" "$r/usr/bin/etcdctl" "$r"/usr/lib/quorate/etcd-3.*/*; do
  for l in $(ldd "$b" 2>/dev/null | grep -oE '/[^ ]+' || true); do
    [ -e "$r$l" ] && continue
    mkdir -p "$r$(dirname "$l")"
    cp -L "$l" "$r$l"
  done
done
# the loader must exist, or nothing runs ("no such file or directory" from the runtime)
interp=$(readelf -l "$QUORATE" 2>/dev/null | sed -n 's/.*interpreter: \(.*\)]/\1/p' || true)
[ -z "$interp" ] || [ -e "$r$interp" ] || die "the loader $interp did not make it into the image"
cp -L /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nquorate:x:65532:65532:quorate:/var/lib/quorate:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$r/etc/passwd"
printf 'root:x:0:\nquorate:x:65532:\nnogroup:x:65534:\n' > "$r/etc/group"
printf 'hosts: files dns\n' > "$r/etc/nsswitch.conf"
# a smoke test of the layout: each binary runs with only the rootfs' libraries
# (etcd built from Go modules is static: ldd says "not a dynamic executable" and exits 1)
smoke=(/usr/local/bin/quorate /usr/bin/etcd /usr/bin/etcdctl)
for minor in "${ETCD_MINORS[@]}"; do smoke+=("/usr/lib/quorate/etcd-$minor/etcd"); done
for b in "${smoke[@]}"; do
  [ -x "$r$b" ] || die "$b is missing from the image"
  missing=$( (ldd "$r$b" 2>&1 || true) | awk '/not found/ { print $1 }')
  [ -z "$missing" ] || die "$b needs libraries that are not in the image: $missing"
done

log "packing $ref"
MKIMAGE_USER=65532:65532 \
  "$ROOT/scripts/k8s-node/mkimage.sh" "$r" "$ref" "$out" '["quorate"]' null /var/lib/quorate >&2
log "done in $(( $(date +%s) - T0 ))s: $ref, $(du -h "$out" | cut -f1)"
echo "$out"
