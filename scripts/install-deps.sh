#!/usr/bin/env bash
# Installs what building and testing quorate needs, skipping what is already there:
# etcd 3.4 (server + etcdctl) from Debian, etcd 3.5, 3.6 and 3.7 built from pinned Go modules
# (scripts/install-etcd.sh; needs Go 1.26+), protoc with its well-known types, and (as root)
# iptables from Debian; moto's S3 server; OpenStack Swift, Keystone and memcached from Debian;
# mdBook; promtool; kube-apiserver and kubectl. Safe to run repeatedly.
#
#   scripts/install-deps.sh          # everything the tests need
#   scripts/install-deps.sh --local  # only what building quorate and running local mode need
#                                    # (etcd 3.4, etcd 3.6 — what new clusters run —, protoc):
#                                    # the quick start's fast path
#   scripts/install-deps.sh --workspace  # only what the workspace's tests need: everything but
#                                    # helm, mdBook and the node kit's pieces besides Kubernetes
#                                    # (scripts/test.sh builds those while the tests run)
set -euo pipefail
local_only=false workspace_only=false
case "${1:-}" in
  --local) local_only=true ;;
  --workspace) workspace_only=true ;;
  "") ;;
  *) echo "usage: $0 [--local | --workspace]" >&2; exit 2 ;;
esac

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
# scripts/run-tests.sh reads cargo's list of test binaries with jq.
$local_only || command -v jq >/dev/null 2>&1 || need+=(jq)
# protoc's well-known types (google/protobuf/descriptor.proto, ...) that etcd-client's protos
# import; only a recommendation of protobuf-compiler, so --no-install-recommends skips them.
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
# The fault-injection suite cuts members off the network with iptables (as root).
if [ "$(id -u)" = 0 ] && ! $local_only; then command -v iptables >/dev/null 2>&1 || need+=(iptables); fi

if ((${#need[@]})); then
  echo "installing: ${need[*]}" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The Debian etcd-server package starts a system etcd on 2379/2380; quorate's clusters must not
# collide with it, so stop it if a service manager started it.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  systemctl stop etcd || true
fi
if pgrep -x etcd -u etcd >/dev/null 2>&1; then pkill -x -u etcd etcd || true; fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is missing: install a Rust toolchain (1.95 or newer) first, e.g. from rustup" >&2
  exit 1
fi


# etcd 3.5, 3.6 and 3.7 (etcd, etcdctl, etcdutl), built from the Go modules pinned in
# tools/etcd/vX.Y/ into ~/.cache/quorate/etcd-X.Y (or $QUORATE_ETCD_X_Y_DIR), where quorate
# looks for them. Local mode needs only 3.6, the version new clusters run.
if $local_only; then
  bash "$(dirname "$0")/install-etcd.sh" 3.6
else
  bash "$(dirname "$0")/install-etcd.sh" 3.5 3.6 3.7
fi

if $local_only; then
  exit 0
fi

# helm, built from the Go module pinned in tools/helm/ into ~/.cache/quorate/bin (or
# $QUORATE_BIN_DIR), for scripts/helm-check.sh and the node kit's chart install.
$workspace_only || bash "$(dirname "$0")/install-helm.sh"

# moto's S3 server, the second S3 implementation the store tests run against (the first is
# s3s-fs inside the test process). Installed into a venv once; tests find it at
# ~/.cache/quorate/venv/bin/moto_server (or $QUORATE_VENV/bin/moto_server).
venv="${QUORATE_VENV:-$HOME/.cache/quorate/venv}"
if [ ! -x "$venv/bin/moto_server" ]; then
  echo "installing moto[server] into $venv" >&2
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
  fi
  rm -rf "$venv"
  python3 -m venv "$venv" >/dev/null
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]" >/dev/null
fi


# OpenStack Swift (Debian's proxy, account, container and object servers), memcached and
# Keystone, for the Swift store tests (crates/quorate-backup/tests/store_swift.rs); about
# 2.5 minutes cold, the script says how long it took.
bash "$(dirname "$0")/install-swift.sh"

# mdBook, which renders docs/ (scripts/test.sh builds the book), from crates.io at a pinned
# version into ~/.cache/quorate/mdbook: Debian bookworm has no package.
$workspace_only || bash "$(dirname "$0")/install-mdbook.sh"

# promtool, for the tests of the alert rules in deploy/monitoring/ (unpacked from Debian's
# prometheus package into ~/.cache/quorate/prometheus, not installed).
bash "$(dirname "$0")/install-promtool.sh"

# history-check, the porcupine-based second checker of the fault suite's histories (built from
# tools/history-check into ~/.cache/quorate/bin).
bash "$(dirname "$0")/build-history-check.sh"

# A real Kubernetes for the tests that need a kube-apiserver and for the node kit: v1.37.2 from
# its Go modules (scripts/k8s/build-modules.sh: one multi-call binary, containerd, crictl,
# CoreDNS) into ${QUORATE_K8S_HOME:-~/.cache/quorate/k8s-1.37}/bin, once. The workspace's tests
# need only Kubernetes (kube-apiserver).
if $workspace_only; then
  echo "building Kubernetes v1.37.2 from Go modules, when not built yet" >&2
  QUORATE_K8S_PIECES=kubernetes bash "$(dirname "$0")/k8s/build-modules.sh" >/dev/null
else
  echo "building Kubernetes v1.37.2 (and containerd, crictl, CoreDNS) from Go modules, when not built yet" >&2
  bash "$(dirname "$0")/k8s/build-modules.sh" >/dev/null
fi
