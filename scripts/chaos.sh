#!/usr/bin/env bash
# The fault-injection soak: builds quorate and quorate-chaos (release), then injects a drawn,
# seeded schedule of faults into local clusters for --duration while clients write, and checks
# the history (linearizable, nothing acknowledged lost). Writes the report to
# docs/reliability/soak.md unless --report says otherwise. Partitions and full disks need root;
# without it they are left out and the report says so.
#   scripts/chaos.sh --duration 30m [--seed N] [--run-length 10m] [--clients 4] [--report FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quorate/target}"
bash scripts/install-deps.sh
cargo build --release -p quorate -p quorate-chaos
args=("$@")
case " $* " in *" --report "*) ;; *) args+=(--report docs/reliability/soak.md) ;; esac
mkdir -p docs/reliability
exec "$CARGO_TARGET_DIR/release/quorate-chaos" --quorate-bin "$CARGO_TARGET_DIR/release/quorate" "${args[@]}"
