#!/usr/bin/env bash
# Brings up the example 3-member etcd cluster with backups on this machine and shows its status.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what local mode needs (etcd 3.4, etcd 3.6 built from its pinned Go modules, protoc): the tests' extras (moto, promtool,
# kube-apiserver) are installed by the test command.
bash scripts/install-deps.sh --local
cargo build --profile quickstart --quiet -p quorate
bin="${CARGO_TARGET_DIR:-target}/quickstart/quorate"
"$bin" up -d -f examples/etcd-cluster.yaml
echo
"$bin" members etcd-main
echo
endpoints=$("$bin" endpoints etcd-main)
echo "etcdctl --endpoints=$endpoints endpoint status -w table"
etcdctl --endpoints="$endpoints" endpoint status -w table
echo
echo "waiting for the first backup ..."
for _ in $(seq 30); do
  grep -q 'true *True *True *True' <<<"$("$bin" get etcd etcd-main)" && break
  sleep 1
done
"$bin" get etcd -o wide
"$bin" backups list etcd-main
echo
echo "Stop it with: $bin down etcd-main   (add --purge to delete its data and backups)"
