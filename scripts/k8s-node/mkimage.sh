#!/bin/bash
# mkimage.sh: pack a directory (a root filesystem) into a one-layer container image tarball
# in `docker save` format, which `ctr -n k8s.io images import`, up.sh ($QUORATE_K8S_NODE_IMAGES),
# `docker load` and `kind load image-archive` load. No registry, no docker daemon, no root needed.
# Copied from shared/k8s-node/mkimage.sh, plus MKIMAGE_USER.
#
# usage: mkimage.sh ROOTFS_DIR IMAGE_REF OUT.tar [ENTRYPOINT_JSON] [CMD_JSON] [WORKDIR]
#   ENTRYPOINT_JSON, CMD_JSON: JSON arrays such as '["/bin/app","-v"]', or null (default)
#   WORKDIR: default /
#   env MKIMAGE_ENV: JSON array of the image's environment (default: a standard PATH)
#   env MKIMAGE_USER: the image's user, e.g. 65532:65532 (default: none, i.e. root)
#   e.g. mkimage.sh ./rootfs k8s.local/app:1 app.tar '["/bin/app"]'
#
# Use a reference with a dot in its first part (k8s.local/...) and a tag other than
# `latest`: kubelet's default imagePullPolicy is then IfNotPresent and nothing is pulled
# (or set imagePullPolicy: Never). Every file goes in owned by root (0:0) with mtime 0,
# so the same directory always gives the same image. A dynamically linked program needs
# its shared libraries and loader in the rootfs (see `ldd`).
set -euo pipefail
if [ $# -lt 3 ]; then awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; fi
rootfs=$1 ref=$2 out=$3 ep=${4:-null} cmd=${5:-null} wd=${6:-/}
env_json=${MKIMAGE_ENV:-'["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'}
user=${MKIMAGE_USER:-}
case "$user" in *[!0-9a-z:_-]*) echo "mkimage.sh: not a user[:group]: $user" >&2; exit 1 ;; esac
[ -d "$rootfs" ] || { echo "mkimage.sh: no such directory: $rootfs" >&2; exit 1; }
case "$ref" in *:*) ;; *) echo "mkimage.sh: IMAGE_REF needs a tag (name:tag): $ref" >&2; exit 1 ;; esac
for j in "$ep" "$cmd" "$env_json"; do
  case "$j" in null | \[*\]) ;; *) echo "mkimage.sh: not a JSON array or null: $j" >&2; exit 1 ;; esac
done
case "$(uname -m)" in
  x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; armv7l) arch=arm ;; *) arch=$(uname -m) ;;
esac
out_abs=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$rootfs" -cf "$work/layer.tar" .
diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
cat > "$work/config.json" <<JSON
{"architecture":"$arch","os":"linux","created":"1970-01-01T00:00:00Z","config":{"User":"$user","Env":$env_json,"Entrypoint":$ep,"Cmd":$cmd,"WorkingDir":"$wd"},"rootfs":{"type":"layers","diff_ids":["sha256:$diffid"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"mkimage.sh"}]}
JSON
cfgid=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/$cfgid.json"
mkdir "$work/$diffid"; mv "$work/layer.tar" "$work/$diffid/layer.tar"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]\n' \
  "$cfgid" "$ref" "$diffid" > "$work/manifest.json"
tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" \
    -cf "$out_abs.tmp" manifest.json "$cfgid.json" "$diffid"
mv "$out_abs.tmp" "$out_abs"
echo "$out: $ref (config sha256:$cfgid)"
