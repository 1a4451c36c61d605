#!/usr/bin/env bash
# Builds etcd, etcdctl and etcdutl of each named minor (default: 3.5 3.6 3.7) from the pinned Go
# modules in tools/etcd/vX.Y/ (a wrapper module whose go.mod and go.sum pin go.etcd.io/etcd/
# {server,etcdctl,etcdutl}/v3 at one patch) and installs them into
# ${QUORATE_ETCD_X_Y_DIR:-~/.cache/quorate/etcd-X.Y} (e.g. QUORATE_ETCD_3_6_DIR).
#
#   scripts/install-etcd.sh            # 3.5, 3.6 and 3.7
#   scripts/install-etcd.sh 3.6        # only the default version (the quick start)
#
# Idempotent: a version whose installed etcd, etcdctl and etcdutl already report the pinned
# patch is skipped. Built with the machine's Go (GOTOOLCHAIN=local: no toolchain download),
# -trimpath, CGO off (static, as etcd's own release builds), the module graph read-only (go.sum
# must already hold every hash), and the version variable GitSHA set, since a module build has
# no git metadata. Each binary is built into a temporary directory beside the destination and
# renamed over the old one, so a process using the directory meanwhile sees an old or a new
# binary, never a half-written one. etcd 3.4 is Debian's (scripts/install-deps.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
versions=("$@")
if ((${#versions[@]} == 0)); then versions=(3.5 3.6 3.7); fi

export GOTOOLCHAIN=local CGO_ENABLED=0
if ! command -v go >/dev/null 2>&1; then
  echo "install-etcd.sh: go is missing; install Go 1.26 or newer (etcd 3.5.35+ and 3.7 need it)" >&2
  exit 1
fi

# The first line of `$1 $2`'s output. Read whole, then cut: piping into `head`/`grep -q` lets the
# reader exit early, the binary die of SIGPIPE and pipefail turn that into exit 141.
first_line() {
  local out
  out=$("$1" "$2" 2>/dev/null) || true
  echo "${out%%$'\n'*}"
}

# Whether the binaries in $1 all report patch $2.
installed() {
  [ -x "$1/etcd" ] && [ -x "$1/etcdctl" ] && [ -x "$1/etcdutl" ] \
    && [ "$(first_line "$1/etcd" --version)" = "etcd Version: $2" ] \
    && [ "$(first_line "$1/etcdctl" version)" = "etcdctl version: $2" ] \
    && [ "$(first_line "$1/etcdutl" version)" = "etcdutl version: $2" ]
}

for minor in "${versions[@]}"; do
  mod="$ROOT/tools/etcd/v$minor"
  if [[ ! "$minor" =~ ^3\.[0-9]+$ ]] || [ ! -f "$mod/go.mod" ]; then
    echo "install-etcd.sh: no pinned etcd '$minor' (there is a module for: $(cd "$ROOT/tools/etcd" && echo v* | sed 's/v//g'))" >&2
    exit 2
  fi
  patch=$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ { sub(/^v/, "", $2); print $2 }' "$mod/go.mod")
  if [ -z "$patch" ]; then
    echo "install-etcd.sh: $mod/go.mod does not require go.etcd.io/etcd/server/v3" >&2
    exit 1
  fi
  var="QUORATE_ETCD_${minor/./_}_DIR"
  dest="${!var:-$HOME/.cache/quorate/etcd-$minor}"
  if installed "$dest" "$patch"; then continue; fi

  mkdir -p "$dest"
  # One installer per destination at a time (CI and a developer may run this together).
  exec 9>"$dest/.install.lock"
  flock 9
  if installed "$dest" "$patch"; then exec 9>&-; continue; fi
  echo "building etcd $patch (etcd, etcdctl, etcdutl) from $mod into $dest" >&2
  work=$(mktemp -d "$dest/.build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  sha="module-v$patch"
  for pair in etcd:go.etcd.io/etcd/server/v3 etcdctl:go.etcd.io/etcd/etcdctl/v3 \
    etcdutl:go.etcd.io/etcd/etcdutl/v3; do
    (cd "$mod" && nice go build -mod=readonly -trimpath \
      -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$sha" \
      -o "$work/${pair%%:*}" "${pair#*:}")
  done
  if ! installed "$work" "$patch"; then
    echo "install-etcd.sh: the build of $patch reports '$(first_line "$work/etcd" --version)'" >&2
    exit 1
  fi
  # etcd last: once it reports the pinned patch, the tools beside it do too.
  for bin in etcdctl etcdutl etcd; do mv -f "$work/$bin" "$dest/$bin"; done
  rm -rf "$work"
  trap - EXIT
  exec 9>&-
  echo "etcd $patch installed in $dest" >&2
done
