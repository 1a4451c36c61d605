#!/usr/bin/env bash
# Puts etcd 3.5 (etcd, etcdctl, etcdutl) into ${QUORATE_ETCD_3_5_DIR:-~/.cache/quorate/etcd-3.5}:
# Debian's etcd-server and etcd-client at a pinned version from the sid suite, downloaded through
# a temporary apt source (this machine's sources and packages are untouched), checked against
# their pinned SHA-256 and unpacked with dpkg-deb -x. Runs on bookworm (the binaries need only
# libc). Safe to run repeatedly; the image (scripts/image.sh) uses it too.
set -euo pipefail

VERSION=3.5.30-2
# SHA-256 of the amd64 packages (apt checks every architecture's against the signed index too).
declare -A SHA256=(
  [etcd-server]=11a4f7e350c5020b83edff5160a6063d4e56ac9cd014d21ce8916378bf96de79
  [etcd-client]=1e66ad2aba4cba6842a1ac35d5c525e750102b8fb42748225bcb2e34d6595931
)
dest="${QUORATE_ETCD_3_5_DIR:-$HOME/.cache/quorate/etcd-3.5}"
want="etcd Version: ${VERSION%-*}"
# Read whole, then cut: piping `etcd --version` into `grep -q` lets grep exit at the first line,
# etcd die of SIGPIPE writing the next, and pipefail turn that into exit 141.
installed_version() {
  local out
  out=$("$dest/etcd" --version 2>/dev/null) || true
  echo "${out%%$'\n'*}"
}
if [ -x "$dest/etcd" ] && [ "$(installed_version)" = "$want" ] \
  && [ -x "$dest/etcdctl" ] && [ -x "$dest/etcdutl" ]; then
  exit 0
fi
echo "installing etcd ${VERSION%-*} from Debian sid into $dest" >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" \
  > "$work/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null"
  -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
)
apt-get "${apt_opts[@]}" -qq update
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "etcd-server=$VERSION" "etcd-client=$VERSION")
for pkg in etcd-server etcd-client; do
  deb=$(echo "$work/debs/${pkg}_"*.deb)
  sum=$(sha256sum "$deb" | cut -d' ' -f1)
  if [ "$(dpkg --print-architecture)" = amd64 ] && [ "$sum" != "${SHA256[$pkg]}" ]; then
    echo "install-etcd35.sh: $deb has SHA-256 $sum, expected ${SHA256[$pkg]}; not installing" >&2
    exit 1
  fi
  dpkg-deb -x "$deb" "$work/root"
done
mkdir -p "$dest"
for bin in etcd etcdctl etcdutl; do
  install -m 0755 "$work/root/usr/bin/$bin" "$dest/$bin"
done
if [ "$(installed_version)" != "$want" ]; then
  echo "install-etcd35.sh: $dest/etcd reports '$(installed_version)', expected '$want'" >&2
  exit 1
fi
