#!/usr/bin/env bash
# The fault-injection suite: builds quorate and quorate-chaos (release) and the second history
# checker (tools/history-check), then injects faults into local clusters while clients write,
# and checks every run's history twice: with quorate's own checker and with porcupine. Each
# history is kept as JSON lines (docs/reference/history-format.md) under --history-dir.
# Partitions and full disks need root; without it they are left out and the report says so.
#   scripts/chaos.sh --duration 30m [--seed N] [--run-length 10m] [--clients 4] [--report FILE]
#     the soak: a drawn, seeded schedule for --duration; report in docs/reliability/soak.md
#   scripts/chaos.sh --short [--seed N] [--report FILE]
#     the short run for CI: every kind of fault and operation once (seed 13), a few minutes;
#     report in $CARGO_TARGET_DIR/chaos-short.md
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quorate/target}"
bash scripts/install-deps.sh
bash scripts/build-history-check.sh
cargo build --release -p quorate -p quorate-chaos
args=("$@")
case " $* " in
  *" --report "*) ;;
  *" --short "*) args+=(--report "$CARGO_TARGET_DIR/chaos-short.md") ;;
  *) mkdir -p docs/reliability; args+=(--report docs/reliability/soak.md) ;;
esac
case " $* " in *" --history-dir "*) ;; *) args+=(--history-dir "$CARGO_TARGET_DIR/chaos-histories") ;; esac
exec "$CARGO_TARGET_DIR/release/quorate-chaos" --quorate-bin "$CARGO_TARGET_DIR/release/quorate" \
  --history-check "${QUORATE_CACHE:-$HOME/.cache/quorate}/bin/history-check" "${args[@]}"
