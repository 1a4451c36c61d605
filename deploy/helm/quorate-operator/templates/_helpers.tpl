{{/* Name of the operator's objects: quorate-operator unless fullnameOverride says otherwise. */}}
{{- define "quorate-operator.fullname" -}}
{{- default "quorate-operator" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Namespace of the operator's objects: .Values.namespace, else the release namespace. */}}
{{- define "quorate-operator.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* The webhook Service, which the self-signed certificate is made for. */}}
{{- define "quorate-operator.webhookService" -}}
{{- printf "%s-webhook" (include "quorate-operator.fullname" .) -}}
{{- end -}}

{{/* "true" when the operator makes its own webhook certificate, else empty. */}}
{{- define "quorate-operator.selfSigned" -}}
{{- if and .Values.webhook.enabled .Values.webhook.certificate.selfSigned -}}true{{- end -}}
{{- end -}}

{{/* Labels of every object. Never app.kubernetes.io/managed-by: etcd-druid, which marks the
     components the operator manages (and the protection webhook guards). */}}
{{- define "quorate-operator.labels" -}}
app.kubernetes.io/name: {{ include "quorate-operator.fullname" . }}
app.kubernetes.io/part-of: quorate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels the Deployment selects its pods and the Services their endpoints by. */}}
{{- define "quorate-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quorate-operator.fullname" . }}
{{- end -}}
