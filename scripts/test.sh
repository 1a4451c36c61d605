#!/usr/bin/env bash
# Runs every test of quorate, installing what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo test --workspace --all-targets "$@"
