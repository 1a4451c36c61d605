#!/usr/bin/env bash
# Runs every test of quorate, installing what the tests need first: the workspace's tests, then
# (as root, with no test filter given) the end-to-end suite on a real three-node Kubernetes
# (scripts/e2e.sh). QUORATE_E2E=0 leaves the end-to-end suite out; QUORATE_E2E=1 makes its
# absence (not root) an error instead of a notice. A failing part does not stop the later ones:
# the script names every part that failed at the end and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The harness's own skip check is for direct `cargo test` runs; here e2e.sh runs it below.
# Every test binary runs even after one fails, so one CI run names every failure: with no
# arguments side by side (scripts/run-tests.sh), with a test filter through cargo.
failed=()
if [ $# -eq 0 ]; then
  bash scripts/run-tests.sh || failed+=("workspace tests")
else
  QUORATE_E2E= cargo test --workspace --all-targets --no-fail-fast "$@" || failed+=("cargo test")
fi
# The documentation renders as a book (links are checked by the quorate-docs tests above); the
# output goes to a temporary directory and is thrown away.
book="$(mktemp -d)"
trap 'rm -rf "$book"' EXIT
"${QUORATE_MDBOOK_HOME:-$HOME/.cache/quorate/mdbook}/bin/mdbook" build -d "$book" . >/dev/null ||
  failed+=("mdbook build")
# The Helm chart: `helm lint` and `helm template` with the default and documented values.
bash scripts/helm-check.sh || failed+=("helm-check")
report() {
  [ ${#failed[@]} -eq 0 ] || { echo "[quorate test] FAILED: ${failed[*]}" >&2; exit 1; }
}
[ $# -eq 0 ] || { report; exit 0; }
case "${QUORATE_E2E:-}" in
  0) echo "[quorate test] QUORATE_E2E=0: end-to-end suite left out" >&2 ;;
  *)
    if [ "$(id -u)" = 0 ]; then
      bash scripts/e2e.sh || failed+=("end-to-end suite (scripts/e2e.sh)")
    elif [ "${QUORATE_E2E:-}" = 1 ]; then
      echo "[quorate test] QUORATE_E2E=1 but not root: the end-to-end suite starts a kubelet and needs root (sudo scripts/test.sh)" >&2
      exit 1
    else
      echo "[quorate test] not root: end-to-end suite left out (sudo scripts/e2e.sh runs it)" >&2
    fi
    ;;
esac
report
