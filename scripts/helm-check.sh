#!/usr/bin/env bash
# `helm lint` and `helm template` of deploy/helm/quorate-operator with the default values and
# each variant values.yaml documents, with the helm scripts/install-helm.sh builds; and one
# misspelt value, which values.schema.json must make helm refuse.
set -euo pipefail
cd "$(dirname "$0")/.."
helm="${QUORATE_BIN_DIR:-$HOME/.cache/quorate/bin}/helm"
chart=deploy/helm/quorate-operator
variants=(
  ""
  "--set webhook.enabled=false"
  "--set webhook.certificate.selfSigned=false --set webhook.certificate.secretName=quorate-webhook-tls --set webhook.certificate.caBundle=Y2E="
  "--set replicas=2 --set webhook.certificate.selfSigned=false --set webhook.certificate.secretName=quorate-webhook-tls --set-string webhook.webhookConfigurationAnnotations.cert-manager\.io/inject-ca-from=quorate-system/quorate-operator-webhook"
  "--set shard=1/2 --set fullnameOverride=quorate-operator-1"
  "--set autoReconcile=true --set workers=5 --set etcdNamespaces={default,etcd} --set extraArgs={--log-level=debug}"
  "--set-string imageVectorOverwrite=images:"
  "--set monitoring.podMonitor.enabled=true --set monitoring.podMonitor.namespaces={default} --set monitoring.serviceMonitor.enabled=true --set monitoring.prometheusRule.enabled=true --set monitoring.runbookBaseURL=https://runbooks.example/ --set clusterWideSecrets=true"
)
for variant in "${variants[@]}"; do
  # shellcheck disable=SC2086 # each variant is a list of flags
  "$helm" lint --strict "$chart" $variant >/dev/null
  # shellcheck disable=SC2086
  "$helm" template quorate-operator "$chart" --namespace quorate-system $variant >/dev/null
  echo "[helm-check] lint + template ok: ${variant:-defaults}" >&2
done
if "$helm" template quorate-operator "$chart" --set webhook.enabeld=false >/dev/null 2>&1; then
  echo "[helm-check] a misspelt value (webhook.enabeld) was not refused: values.schema.json is not applied" >&2
  exit 1
fi
echo "[helm-check] a misspelt value is refused by values.schema.json" >&2
