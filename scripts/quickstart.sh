#!/usr/bin/env bash
# Brings up the example 3-member etcd cluster with backups on this machine and shows its status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --quiet -p quorate
bin=target/release/quorate
"$bin" up -d -f examples/etcd-cluster.yaml
"$bin" get etcd -o wide
"$bin" members etcd-main
echo
echo "etcdctl --endpoints=$("$bin" endpoints etcd-main) endpoint status -w table"
etcdctl --endpoints="$("$bin" endpoints etcd-main)" endpoint status -w table
echo
echo "Stop it with: $bin down etcd-main   (add --purge to delete its data)"
