#!/usr/bin/env bash
# e2e.sh: quorate's end-to-end suite on a real Kubernetes node, in one command.
#
#   sudo scripts/e2e.sh [TEST_FILTER...]        # as root: builds and uses scripts/k8s-node
#   KUBECONFIG=~/.kube/config QUORATE_E2E_LOAD_IMAGE="kind load image-archive" scripts/e2e.sh
#
# 1. builds the image tarball k8s.local/quorate:<version> (scripts/image.sh) and the test binary;
# 2. without KUBECONFIG: builds (scripts/k8s-node/build.sh, cached in ~/.cache/quorate/k8s-1.37) and
#    starts the three-node cluster of scripts/k8s-node with the image imported, and tears it down
#    again on exit, whatever happened. With KUBECONFIG: uses that cluster and only loads the image
#    with the command in QUORATE_E2E_LOAD_IMAGE (the tarball's path is appended);
# 3. installs the operator with Helm from deploy/helm/quorate-operator (the image set to the one
#    built, `imageVectorOverwrite` mapping `quorate` to it and `alpine` to $QUORATE_E2E_INIT_IMAGE;
#    helm from scripts/install-helm.sh), waits for the Deployment and for its webhooks to answer,
#    and runs `helm test`; QUORATE_E2E_INSTALL=manifests installs deploy/manifests/ with kubectl
#    instead (a patched copy with the same image and overwrite);
# 4. runs `cargo test --workspace --test e2e -- --test-threads=1 --nocapture [TEST_FILTER...]`
#    (`--workspace`, not `-p quorate-e2e`: cargo then unifies features as scripts/run-tests.sh's
#    build did, and reuses its dependencies instead of building them again)
#    with QUORATE_E2E_KUBECONFIG set. On the node kit, which has no storage provisioner, the
#    harness creates a hostPath PersistentVolume (under a temp dir) for each claim and removes it
#    again; on another cluster claims go to its default StorageClass;
# 5. writes the timings (build, node, install, each scenario) to docs/e2e/results.md, and when
#    something failed copies the logs (operator, etcd pods, events, kubelet, control plane) to
#    /tmp/quorate-e2e-logs before the node goes away.
#
# Environment:
#   KUBECONFIG                 use this cluster instead of the node kit (then also:)
#   QUORATE_E2E_LOAD_IMAGE     command that loads an image tarball into that cluster, e.g.
#                              "kind load image-archive" or "minikube image load"
#   QUORATE_E2E_INIT_IMAGE     image with sh and chown for Local backup buckets (the `alpine`
#                              entry); default k8s.local/busybox:1.35 on the node kit,
#                              docker.io/library/busybox:1.36 elsewhere
#   QUORATE_E2E_HOSTPATH_DIR   with KUBECONFIG: provision hostPath volumes under this directory
#                              of the (single) node too, for clusters without a StorageClass
#   QUORATE_E2E_INSTALL        helm (default) or manifests: how the operator is installed
#   QUORATE_E2E_KEEP_NODE=1    leave the node kit up afterwards (down: scripts/k8s-node/down.sh)
#   QUORATE_E2E_RESULTS_MD     where the timings go (default docs/e2e/results.md)
#   QUORATE_E2E_BENCH_MD       where the benchmark goes when s1, s2 and s2b passed
#                              (default docs/benchmarks/e2e.md)
#   QUORATE_E2E_ROLLOUT_MD     where the rolling-update benchmark goes when s9 and s9b passed
#                              (default docs/benchmarks/rollout.md)
#   QUORATE_IMAGE_PROFILE      cargo profile of the image's quorate (default release; .ci/run
#                              sets quickstart, a third of the cold build time)
#   CARGO_TARGET_DIR           default ~/.cache/quorate/target
# Exit status: that of the tests (or of the first step that failed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { echo "[quorate e2e] $*" >&2; }
die() { log "$*"; exit 1; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/quorate/target}
# The node kit: Kubernetes v1.37 from Go modules, three nodes, containerd v2, CoreDNS.
K8S_HOME=${QUORATE_K8S_HOME:-$HOME/.cache/quorate/k8s-1.37}
LOGS_OUT=/tmp/quorate-e2e-logs
RESULTS_MD=${QUORATE_E2E_RESULTS_MD:-$ROOT/docs/e2e/results.md}
WORK=$(mktemp -d /tmp/quorate-e2e.XXXXXX)
chmod 755 "$WORK"
PHASES=$WORK/phases.tsv        # phase <TAB> seconds
RESULTS=$WORK/results.tsv      # written by the harness: scenario <TAB> result <TAB> seconds <TAB> details
BENCH=$WORK/bench.tsv          # written by passed scenarios: scenario <TAB> key <TAB> value
BENCH_MD=${QUORATE_E2E_BENCH_MD:-$ROOT/docs/benchmarks/e2e.md}
ROLLOUT_MD=${QUORATE_E2E_ROLLOUT_MD:-$ROOT/docs/benchmarks/rollout.md}
: > "$PHASES"; : > "$RESULTS"; : > "$BENCH"
T_START=$(date +%s)
phase_start() { PHASE=$1; PHASE_T0=$(date +%s%N); log "== $PHASE"; }
phase_end() { awk -v p="$PHASE" -v a="$PHASE_T0" -v b="$(date +%s%N)" 'BEGIN { printf "%s\t%.1f\n", p, (b - a) / 1e9 }' >> "$PHASES"; }

version=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 } p && /^version *=/ { gsub(/[" ]/, "", $0); sub(/^version=/, ""); print; exit }' Cargo.toml)
IMAGE=k8s.local/quorate:$version
NODE_KIT=1
if [ -n "${KUBECONFIG:-}" ]; then
  NODE_KIT=0
  [ -f "$KUBECONFIG" ] || die "KUBECONFIG=$KUBECONFIG is not a file"
  [ -n "${QUORATE_E2E_LOAD_IMAGE:-}" ] || die "with KUBECONFIG, set QUORATE_E2E_LOAD_IMAGE to a command that loads an image tarball into that cluster (e.g. \"kind load image-archive\")"
  KUBECTL=${KUBECTL:-$(command -v kubectl || true)}
  [ -n "$KUBECTL" ] || KUBECTL=$K8S_HOME/bin/kubectl
  INIT_IMAGE=${QUORATE_E2E_INIT_IMAGE:-docker.io/library/busybox:1.36}
  HOSTPATH_DIR=${QUORATE_E2E_HOSTPATH_DIR:-}
else
  [ "$(id -u)" = 0 ] || die "the node kit needs root (or set KUBECONFIG and QUORATE_E2E_LOAD_IMAGE to use another cluster)"
  KUBECTL=$K8S_HOME/bin/kubectl
  INIT_IMAGE=${QUORATE_E2E_INIT_IMAGE:-k8s.local/busybox:1.35}
  HOSTPATH_DIR=$WORK/volumes
fi
[ -z "$HOSTPATH_DIR" ] || mkdir -p "$HOSTPATH_DIR"
# Free disk before the node kit starts: the release build, the image, three containerd roots and
# the members' volumes need a few GiB; a disk that fills mid-run fails scenarios for no reason of
# theirs. QUORATE_E2E_MIN_FREE_GIB sets the floor (default 5).
if [ "$NODE_KIT" = 1 ]; then
  for dir in /tmp /var/lib "$CARGO_TARGET_DIR"; do
    mkdir -p "$dir"
    free=$(df -P -BG "$dir" | awk 'NR == 2 { sub(/G$/, "", $4); print $4 }')
    [ "$free" -ge "${QUORATE_E2E_MIN_FREE_GIB:-5}" ] \
      || die "only ${free} GiB free under $dir; the node kit needs ${QUORATE_E2E_MIN_FREE_GIB:-5} GiB (free space, e.g. docker/go caches or old target dirs, or set QUORATE_E2E_MIN_FREE_GIB)"
  done
  log "free disk checked: at least ${QUORATE_E2E_MIN_FREE_GIB:-5} GiB under /tmp, /var/lib and $CARGO_TARGET_DIR"
fi

# ---- results and logs, whatever happens ----
write_results() {
  local status=$1 f
  mkdir -p "$(dirname "$RESULTS_MD")"
  f=$RESULTS_MD.tmp
  {
    echo "# End-to-end results"
    echo
    echo "Written by \`scripts/e2e.sh\` ($(date -u +%Y-%m-%dT%H:%M:%SZ)): **$status**."
    echo
    echo "- commit: \`$(git rev-parse --short HEAD 2>/dev/null || echo '?')\`$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null || echo ' (with uncommitted changes in crates/)')"
    if [ "$NODE_KIT" = 1 ]; then
        echo "- cluster: scripts/k8s-node (Kubernetes $("$K8S_HOME/bin/kube-apiserver" --version 2>/dev/null | awk '{print $2}'), ${NODE_COUNT:-?} nodes, containerd $("$K8S_HOME/bin/containerd" --version 2>/dev/null | awk '{print $3}'), runc $(runc --version 2>/dev/null | awk 'NR == 1 {print $3}'), $("$K8S_HOME/bin/coredns" -version 2>/dev/null | head -1))"
    else
      echo "- cluster: \`$($KUBECTL --kubeconfig "$KUBECONFIG" config current-context 2>/dev/null || echo '?')\` ($($KUBECTL --kubeconfig "$KUBECONFIG" version -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -1))"
    fi
    echo "- machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -r)"
    echo "- image: \`$IMAGE\` (quorate built with the \`${QUORATE_IMAGE_PROFILE:-release}\` profile, etcd 3.4 from Debian, 3.5, 3.6 and 3.7 from Go modules), init image \`$INIT_IMAGE\`"
    echo
    echo "| step | seconds |"
    echo "|---|---:|"
    awk -F'\t' '{ printf "| %s | %s |\n", $1, $2 }' "$PHASES"
    echo "| total | $(( $(date +%s) - T_START )) |"
    echo
    if [ -s "$RESULTS" ]; then
      echo "| scenario | result | seconds | measured |"
      echo "|---|---|---:|---|"
      awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$RESULTS"
    else
      echo "No scenario ran."
    fi
  } > "$f"
  mv "$f" "$RESULTS_MD"
  log "results: $RESULTS_MD"
}

# The cluster the run used, in words for the benchmark pages.
cluster_words() {
  if [ "$NODE_KIT" = 0 ]; then echo "the cluster in KUBECONFIG"
  else echo "the node kit (Kubernetes $("$K8S_HOME/bin/kube-apiserver" --version 2>/dev/null | awk '{print $2}'), ${NODE_COUNT:-?} nodes)"; fi
}

# The benchmark table (apply→Ready, the TLS-enabling 1→3 scale-out against the same scale-out
# with TLS already on), written only when all three scenarios passed in this run.
write_benchmark() {
  local f=$BENCH_MD.tmp
  for k in "s1-ready apply_to_ready_seconds" "s2-tls-scale scale_out_seconds" "s2b-scale-baseline scale_out_seconds"; do
    awk -F'\t' -v s="${k% *}" -v key="${k#* }" '$1 == s && $2 == key { found = 1 } END { exit !found }' "$BENCH" || return 0
  done
  mkdir -p "$(dirname "$BENCH_MD")"
  {
    echo "# End-to-end benchmark: apply to Ready, and the TLS-enabling scale-out"
    echo
    echo "Written by \`scripts/e2e.sh\` ($(date -u +%Y-%m-%dT%H:%M:%SZ)) from one run of the suite on"
    echo "$(cluster_words), $(nproc) cores, commit \`$(git rev-parse --short HEAD 2>/dev/null || echo '?')\`."
    echo "Times run from \`kubectl apply\` until the condition holds, polled every 0.5 s. Restarts count new"
    echo "pod incarnations plus container restarts of every member pod. Both scale-outs run \`quorate canary\`"
    echo "(\`--write-timeout 5s\`: a write every 100 ms through the client Service, each retried for at most 5 s); their scenarios"
    echo "assert zero failed writes. The baseline grows the same one-member cluster to three with peer"
    echo "TLS already on, so the ratio is what enabling peer TLS in the same apply costs."
    echo
    echo "| measurement | seconds | restarts |"
    echo "|---|---:|---|"
    awk -F'\t' '
      { v[$1 "/" $2] = $3 }
      END {
        printf "| 3-member Etcd with backups: apply → Ready (BackupReady) | %s | %s |\n", v["s1-ready/apply_to_ready_seconds"], v["s1-ready/restarts"]
        printf "| 1→3 with peer TLS enabled in the same apply: apply → 3 voters | %s | %s |\n", v["s2-tls-scale/scale_out_seconds"], v["s2-tls-scale/restarts"]
        printf "| baseline: 1→3 with peer TLS already on: apply → 3 voters | %s | %s |\n", v["s2b-scale-baseline/scale_out_seconds"], v["s2b-scale-baseline/restarts"]
        printf "\n**TLS-enabling scale-out / baseline: %.2fx**\n", v["s2-tls-scale/scale_out_seconds"] / v["s2b-scale-baseline/scale_out_seconds"]
      }' "$BENCH"
    echo
    echo "etcd-druid restarts the first member twice for the same change (DEP-03); quorate restarts it once."
    echo
    echo "Issue 33's targets, each from the same run (a row without a value: its scenario did not pass or"
    echo "did not run). The rolling update is set against the StatefulSet controller's RollingUpdate of the"
    echo "same change in the same run (s9b, as \`docs/benchmarks/rollout.md\` details)."
    echo
    echo "| measurement | seconds | target |"
    echo "|---|---:|---|"
    awk -F'\t' '
      { v[$1 "/" $2] = $3 }
      function row(label, key, target) { printf "| %s | %s | %s |\n", label, (key in v ? v[key] : "–"), target }
      END {
        row("3-member Etcd with backups: apply → Ready", "s1-ready/apply_to_ready_seconds", "≤ 8")
        row("pod deleted → Ready", "s3-member-loss/pod_loss_seconds", "≤ 8")
        row("pod and PVC deleted → 3 voters", "s3-member-loss/volume_loss_seconds", "–")
        row("2 of 3 pods and PVCs deleted → 3 voters (quorum loss)", "s7-quorum-loss/quorum_loss_seconds", "≤ 22")
        row("kubectl delete etcd → nothing left", "s6-delete/delete_seconds", "≤ 6")
        row("CPU request change of 3 pods: quorate, resized in place", "s9b-rollout-baseline/in_place_rollout_seconds", "≤ 0.5x the StatefulSet controller")
        row("CPU request change of 3 pods: StatefulSet controller (baseline)", "s9b-rollout-baseline/rollout_seconds", "–")
        row("a change that needs new pods, 3 pods: quorate", "s9-upgrade/rollout_seconds", "–")
        i = v["s9b-rollout-baseline/in_place_rollout_seconds"]; q = v["s9-upgrade/rollout_seconds"]; b = v["s9b-rollout-baseline/rollout_seconds"]
        if (i != "" && b > 0) printf "\n**CPU request change, quorate in place / StatefulSet controller: %.2fx**\n", i / b
        if (q != "" && b > 0) printf "\n**new pods, quorate / the StatefulSet controller'"'"'s rollout: %.2fx**\n", q / b
      }' "$BENCH"
  } > "$f"
  mv "$f" "$BENCH_MD"
  log "benchmark: $BENCH_MD"
}

# The rolling-update benchmark on a 3-member cluster under a writer: a CPU request change
# resized in place by quorate (s9b) and rolled by the StatefulSet controller's RollingUpdate, as
# etcd-druid rolls it (s9b, the baseline), and a change that needs new pods rolled by quorate
# (s9); written only when both scenarios passed in this run.
write_rollout_benchmark() {
  local f=$ROLLOUT_MD.tmp s k
  for s in s9-upgrade/ s9b-rollout-baseline/ s9b-rollout-baseline/in_place_; do
    for k in rollout_seconds failed_writes longest_write_ms elections; do
      awk -F'\t' -v key="$s$k" '$1 "/" $2 == key { found = 1 } END { exit !found }' "$BENCH" || return 0
    done
  done
  mkdir -p "$(dirname "$ROLLOUT_MD")"
  {
    echo "# Rolling update: quorate against the StatefulSet controller"
    echo
    echo "Written by \`scripts/e2e.sh\` ($(date -u +%Y-%m-%dT%H:%M:%SZ)) from one run of scenarios s9 and s9b on"
    echo "$(cluster_words), $(nproc) cores, commit \`$(git rev-parse --short HEAD 2>/dev/null || echo '?')\`."
    echo "A 3-member cluster with backups under \`quorate canary --write-timeout 5s\` (a write every 100 ms"
    echo "through the client Service). Time runs from the change until every pod runs the new template and"
    echo "is ready. Elections are raft terms (one per leadership change, planned or not). The CPU request"
    echo "change (the etcd container's request up by 10m) is resized in place by quorate (s9b: no pod"
    echo "replaced, etcd never restarts) and rolled by the StatefulSet controller in the same scenario;"
    echo "the change that needs new pods (the CPU request and a pod annotation, etcd 3.5, s9) is rolled"
    echo "by quorate one pod at a time."
    echo
    echo "| method | seconds | failed writes | longest write (ms) | elections |"
    echo "|---|---:|---:|---:|---:|"
    awk -F'\t' '
      { v[$1 "/" $2] = $3 }
      END {
        n = split("s9b-rollout-baseline/in_place_ s9b-rollout-baseline/ s9-upgrade/", ss, " ")
        label["s9b-rollout-baseline/in_place_"] = "CPU request change: quorate, resized in place (pods/resize, one pod at a time)"
        label["s9b-rollout-baseline/"] = "CPU request change: StatefulSet RollingUpdate (highest ordinal first, as etcd-druid)"
        label["s9-upgrade/"] = "a change that needs new pods: quorate (OnDelete: unready first, followers, the leader last)"
        for (i = 1; i <= n; i++) {
          s = ss[i]
          printf "| %s | %s | %s | %s | %s |\n", label[s], v[s "rollout_seconds"], v[s "failed_writes"], v[s "longest_write_ms"], v[s "elections"]
        }
        i = v["s9b-rollout-baseline/in_place_rollout_seconds"]; q = v["s9-upgrade/rollout_seconds"]; b = v["s9b-rollout-baseline/rollout_seconds"]
        printf "\n**CPU request change: quorate in place / StatefulSet controller: %.2fx the time** (target: at most 0.5x, with 0 failed writes).\n", i / b
        printf "\n**New pods: quorate / the StatefulSet controller'"'"'s rollout: %.2fx the time.**\n", q / b
      }' "$BENCH"
  } > "$f"
  mv "$f" "$ROLLOUT_MD"
  log "benchmark: $ROLLOUT_MD"
}

collect_logs() {
  [ -n "${KC:-}" ] || return 0
  rm -rf "$LOGS_OUT"; mkdir -p "$LOGS_OUT/pods"
  log "collecting logs into $LOGS_OUT"
  $KC get nodes,pv -o wide > "$LOGS_OUT/cluster.txt" 2>&1 || true
  $KC get etcd,statefulsets,pods,pvc,services,leases,configmaps -A -o wide > "$LOGS_OUT/objects.txt" 2>&1 || true
  $KC get etcd -A -o yaml > "$LOGS_OUT/etcds.yaml" 2>&1 || true
  $KC get leases,statefulsets -A -o yaml > "$LOGS_OUT/leases-statefulsets.yaml" 2>&1 || true
  $KC get events -A --sort-by=.lastTimestamp -o wide > "$LOGS_OUT/events.txt" 2>&1 || true
  $KC describe pods -A > "$LOGS_OUT/pods-describe.txt" 2>&1 || true
  local ns pod c
  $KC get pods -A --no-headers -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name 2>/dev/null |
    while read -r ns pod; do
      [ "$ns" = kube-system ] && continue
      for c in $($KC -n "$ns" get pod "$pod" -o jsonpath='{.spec.initContainers[*].name} {.spec.containers[*].name}' 2>/dev/null); do
        $KC -n "$ns" logs "$pod" -c "$c" > "$LOGS_OUT/pods/$ns.$pod.$c.log" 2>&1 || true
        $KC -n "$ns" logs "$pod" -c "$c" --previous > "$LOGS_OUT/pods/$ns.$pod.$c.previous.log" 2>/dev/null ||
          rm -f "$LOGS_OUT/pods/$ns.$pod.$c.previous.log"
      done
    done
  if [ "$NODE_KIT" = 1 ]; then
    cp -r /tmp/quorate-k8s-node/logs "$LOGS_OUT/node" 2>/dev/null || true
    cp -r /tmp/quorate-k8s/logs "$LOGS_OUT/control-plane" 2>/dev/null || true
  fi
  cp "$RESULTS" "$PHASES" "$LOGS_OUT/" 2>/dev/null || true
}

RC=0
finish() {
  local rc=$?
  [ "$RC" != 0 ] || RC=$rc
  trap - EXIT INT TERM
  set +e
  if [ "$RC" != 0 ]; then collect_logs; fi
  if [ "$NODE_KIT" = 1 ] && [ "${NODE_STARTED:-0}" = 1 ]; then
    if [ "${QUORATE_E2E_KEEP_NODE:-0}" = 1 ]; then
      log "QUORATE_E2E_KEEP_NODE=1: the node stays up (KUBECONFIG=$KUBECONFIG); scripts/k8s-node/down.sh removes it"
    else
      phase_start "node down"; "$ROOT/scripts/k8s-node/down.sh" >/dev/null 2>"$WORK/down.log" || {
        log "scripts/k8s-node/down.sh failed:"; cat "$WORK/down.log" >&2; }
      phase_end
    fi
  fi
  if [ "${TESTS_RAN:-0}" = 1 ]; then
    if [ "$RC" = 0 ]; then write_results passed; else write_results "FAILED (exit $RC)"; fi
    write_benchmark
    write_rollout_benchmark
  fi
  if [ "$RC" != 0 ]; then log "FAILED (exit $RC); logs in $LOGS_OUT"; else log "passed in $(( $(date +%s) - T_START ))s"; fi
  rm -rf "$WORK"
  exit "$RC"
}
trap finish EXIT
trap 'RC=130; exit 130' INT TERM

# ---- 1. image and test binary ----
phase_start "image (cargo build --profile ${QUORATE_IMAGE_PROFILE:-release}, rootfs, tarball)"
TARBALL=$("$ROOT/scripts/image.sh" --ref "$IMAGE" | tail -n 1)
# s16 runs the image's own binary as the kubectl plugin.
profile_dir=${QUORATE_IMAGE_PROFILE:-release}
[ "$profile_dir" != dev ] || profile_dir=debug
export QUORATE_E2E_PLUGIN=${QUORATE_E2E_PLUGIN:-$CARGO_TARGET_DIR/$profile_dir/quorate}
phase_end
phase_start "test binary (cargo test --no-run)"
cargo test --workspace --test e2e --no-run >&2 2>"$WORK/cargo.log" || { cat "$WORK/cargo.log" >&2; exit 1; }
phase_end

# ---- 2. the cluster ----
if [ "$NODE_KIT" = 1 ]; then
  phase_start "node kit build (scripts/k8s-node/build.sh)"
  "$ROOT/scripts/k8s-node/build.sh" >/dev/null
  phase_end
  phase_start "node up (scripts/k8s-node/up.sh, image import)"
  mkdir -p "$WORK/images"; ln -s "$TARBALL" "$WORK/images/quorate.tar"
  NODE_STARTED=1
  KUBECONFIG=$(QUORATE_K8S_NODE_IMAGES=$WORK/images "$ROOT/scripts/k8s-node/up.sh" | tail -n 1)
  export KUBECONFIG
  phase_end
else
  phase_start "image load ($QUORATE_E2E_LOAD_IMAGE)"
  # shellcheck disable=SC2086
  $QUORATE_E2E_LOAD_IMAGE "$TARBALL" >&2
  phase_end
fi
KC="$KUBECTL --kubeconfig $KUBECONFIG"
$KC version >/dev/null 2>&1 || die "the cluster in $KUBECONFIG does not answer (kubectl version)"
NODE_COUNT=$($KC get nodes --no-headers 2>/dev/null | wc -l)

# ---- 3. the operator ----
# From the Helm chart (deploy/helm/quorate-operator, then `helm test`) by default, as a platform
# team installs it; QUORATE_E2E_INSTALL=manifests: from deploy/manifests/ with kubectl.
INSTALL=${QUORATE_E2E_INSTALL:-helm}
case $INSTALL in helm | manifests) ;; *) die "QUORATE_E2E_INSTALL=$INSTALL: say helm or manifests" ;; esac
phase_start "operator install ($INSTALL, rollout, webhooks answer)"
# The scenarios' Local buckets live under the harness's bucket directory (E2eEnv::bucket_host_dir).
BUCKETS_DIR=${HOSTPATH_DIR:+$HOSTPATH_DIR/buckets}
BUCKETS_DIR=${BUCKETS_DIR:-/tmp/quorate-e2e-buckets}
split_ref() { # image -> "repository tag"
  local ref=$1 repo tag
  repo=${ref%:*} tag=${ref##*:}
  case "$tag" in */*) repo=$ref tag="" ;; esac
  echo "$repo" "$tag"
}
read -r q_repo q_tag <<<"$(split_ref "$IMAGE")"
read -r i_repo i_tag <<<"$(split_ref "$INIT_IMAGE")"
# IMAGEVECTOR_OVERWRITE of the operator: the images under test in the etcd pods it makes
OVERWRITE="images:
- name: quorate
  repository: $q_repo
  tag: \"$q_tag\"
- name: alpine
  repository: $i_repo
  tag: \"$i_tag\""
existed=0
$KC -n quorate-system get deployment quorate-operator >/dev/null 2>&1 && existed=1
if [ "$INSTALL" = helm ]; then
  bash "$ROOT/scripts/install-helm.sh" >&2
  HELM="${QUORATE_BIN_DIR:-$HOME/.cache/quorate/bin}/helm --kubeconfig $KUBECONFIG"
  $HELM upgrade --install quorate-operator deploy/helm/quorate-operator \
    --namespace quorate-system --create-namespace \
    --set image.repository="$q_repo" --set image.tag="$q_tag" \
    --set-string imageVectorOverwrite="$OVERWRITE" \
    --set testImage.repository="$i_repo" --set testImage.tag="$i_tag" \
    --set "extraArgs={--allowed-local-backup-host-path=$BUCKETS_DIR}" >&2 ||
    die "helm upgrade --install of deploy/helm/quorate-operator failed"
else
  M=$WORK/manifests
  mkdir -p "$M"
  cp deploy/manifests/*.yaml "$M/"
  D=$M/08-deployment.yaml
  grep -q "^          image: quorate:$version\$" "$D" || die "$D: no 'image: quorate:$version' line to replace (did the manifest change?)"
  grep -q '^          env:$' "$D" && grep -q '^          volumeMounts:$' "$D" && grep -q '^      volumes:$' "$D" ||
    die "$D: the env/volumeMounts/volumes lines this script patches are not where it expects them"
  awk -v image="$IMAGE" -v buckets="$BUCKETS_DIR" '
    /^          image: / { print "          image: " image; next }
    /^            - --etcd-workers=/ { print; print "            - --allowed-local-backup-host-path=" buckets; next }
    /^          env:$/ { print; print "            - name: IMAGEVECTOR_OVERWRITE"; print "              value: /etc/quorate/imagevector/images_overwrite.yaml"; next }
    /^          volumeMounts:$/ { print; print "            - name: imagevector-overwrite"; print "              mountPath: /etc/quorate/imagevector"; print "              readOnly: true"; next }
    /^      volumes:$/ { print; print "        - name: imagevector-overwrite"; print "          configMap:"; print "            name: quorate-operator-imagevector-overwrite"; next }
    { print }' "$D" > "$D.new" && mv "$D.new" "$D"
  {
    echo "# scripts/e2e.sh: the images under test (IMAGEVECTOR_OVERWRITE of the operator)"
    echo "apiVersion: v1"
    echo "kind: ConfigMap"
    echo "metadata: {name: quorate-operator-imagevector-overwrite, namespace: quorate-system}"
    echo "data:"
    echo "  images_overwrite.yaml: |"
    sed 's/^/    /' <<<"$OVERWRITE"
  } > "$M/075-imagevector-overwrite.yaml"
  $KC apply -f "$M" >&2
fi
# an existing Deployment keeps running the old image under the same tag: restart it
[ "$existed" = 0 ] || $KC -n quorate-system rollout restart deployment/quorate-operator >&2
$KC -n quorate-system rollout status deployment/quorate-operator --timeout=180s >&2 ||
  die "the operator Deployment did not become ready"
# The webhooks answer once a valid Etcd passes a server-side dry run (failurePolicy: Fail refuses
# it while the webhook Service has no ready endpoint or the caBundle is not published yet), and
# they are quorate's once an invalid one is refused with quorate's message.
cat > "$WORK/probe-valid.yaml" <<EOF
apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata: {name: e2e-webhook-probe, namespace: default}
spec: {replicas: 1, labels: {app: e2e-webhook-probe}, etcd: {}, backup: {}}
EOF
sed 's/replicas: 1,/replicas: 1, storageClass: Not_A_Name,/' "$WORK/probe-valid.yaml" > "$WORK/probe-invalid.yaml"
ok=0
for ((i = 0; i < 120; i++)); do
  if out=$($KC create --dry-run=server -f "$WORK/probe-valid.yaml" 2>&1); then ok=1; break; fi
  sleep 1
done
[ "$ok" = 1 ] || die "the operator's webhooks do not answer after 120 s: $out"
out=$($KC create --dry-run=server -f "$WORK/probe-invalid.yaml" 2>&1) &&
  die "an invalid Etcd passed the webhook: $out"
# (the CRD has no pattern for storageClass: this refusal is the webhook's, with quorate's message)
grep -q 'spec.storageClass: "Not_A_Name" is not a valid name' <<<"$out" ||
  die "an invalid Etcd was refused, but not with quorate's webhook message: $out"
if [ "$INSTALL" = helm ]; then
  $HELM test quorate-operator --namespace quorate-system --timeout 120s >&2 ||
    die "helm test quorate-operator failed (its pod checks the operator's /readyz)"
fi
phase_end

# ---- 4. the scenarios ----
phase_start "scenarios (cargo test --test e2e)"
# s14 loses a node and brings it back: only the node kit can (scripts/k8s-node/node.sh)
NODE_CONTROL=""
if [ "$NODE_KIT" = 1 ]; then
  NODE_CONTROL=$ROOT/scripts/k8s-node/node.sh
fi
TESTS_RAN=1
set +e
QUORATE_E2E_KUBECONFIG=$KUBECONFIG \
QUORATE_E2E_KUBECTL=$KUBECTL \
QUORATE_E2E_IMAGE=$IMAGE \
QUORATE_E2E_INIT_IMAGE=$INIT_IMAGE \
QUORATE_E2E_HOSTPATH_DIR=$HOSTPATH_DIR \
QUORATE_E2E_NODE_CONTROL=$NODE_CONTROL \
QUORATE_E2E_RESULTS=$RESULTS QUORATE_E2E_BENCH=$BENCH \
RUST_BACKTRACE=0 \
  cargo test --workspace --test e2e -- --test-threads=1 --nocapture "$@"
RC=$?
set -e
phase_end
exit "$RC"
