#!/usr/bin/env bash
# Builds helm from the Go module pinned in tools/helm/ (a wrapper module whose go.mod and go.sum
# pin helm.sh/helm/v3) and installs it as ${QUORATE_BIN_DIR:-~/.cache/quorate/bin}/helm, for
# scripts/test.sh's `helm lint` / `helm template` of deploy/helm/quorate-operator and the node
# kit's `helm install` / `helm test`.
#
# Idempotent: skipped when the installed helm reports the pinned version. Built with the
# machine's Go (GOTOOLCHAIN=local), -trimpath, CGO off, the module graph read-only (go.sum must
# hold every hash), and helm's version variables set as its Makefile sets them (a module build
# has no git metadata): the version, and the Kubernetes version `helm template` and `helm lint`
# assume, from the client-go the module pins. Built beside the destination, then renamed over it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
mod="$ROOT/tools/helm"
export GOTOOLCHAIN=local CGO_ENABLED=0
if ! command -v go >/dev/null 2>&1; then
  echo "install-helm.sh: go is missing; install Go 1.26 or newer" >&2
  exit 1
fi
version=$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ { print $2 }' "$mod/go.mod")
client_go=$(awk '$1 == "k8s.io/client-go" && $2 ~ /^v/ { print $2 }' "$mod/go.mod")
if [ -z "$version" ] || [ -z "$client_go" ]; then
  echo "install-helm.sh: $mod/go.mod does not pin helm.sh/helm/v3 and k8s.io/client-go" >&2
  exit 1
fi
# client-go v0.N.x goes with Kubernetes 1.N.
k8s_minor=$(echo "$client_go" | sed -E 's/^v0\.([0-9]+)\..*/\1/')
dest_dir="${QUORATE_BIN_DIR:-$HOME/.cache/quorate/bin}"
dest="$dest_dir/helm"

installed() {
  [ -x "$1" ] && [ "$("$1" version --template '{{.Version}}' 2>/dev/null || true)" = "$version" ]
}
if installed "$dest"; then exit 0; fi

mkdir -p "$dest_dir"
exec 9>"$dest_dir/.helm.install.lock"
flock 9
if installed "$dest"; then exit 0; fi
echo "building helm $version (Kubernetes 1.$k8s_minor) from $mod into $dest" >&2
work=$(mktemp -d "$dest_dir/.helm-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
pkg=helm.sh/helm/v3
ldflags="-s -w -X $pkg/internal/version.version=$version -X $pkg/internal/version.metadata="
ldflags+=" -X $pkg/internal/version.gitCommit=module-$version -X $pkg/internal/version.gitTreeState=clean"
for var in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X $pkg/$var.k8sVersionMajor=1 -X $pkg/$var.k8sVersionMinor=$k8s_minor"
done
(cd "$mod" && nice go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$work/helm" "$pkg/cmd/helm")
if ! installed "$work/helm"; then
  echo "install-helm.sh: the build reports '$("$work/helm" version --template '{{.Version}}' 2>&1 || true)', not $version" >&2
  exit 1
fi
mv -f "$work/helm" "$dest"
