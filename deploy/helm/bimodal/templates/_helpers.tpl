{{/* The release's name, shortened to what object names allow. */}}
{{- define "bimodal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "bimodal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component (agent, server, clickhouse). */}}
{{- define "bimodal.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference: registry/name:tag. */}}
{{- define "bimodal.image" -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .name (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{/* The server's URL inside the cluster, as agents reach it. */}}
{{- define "bimodal.serverUrl" -}}
{{- printf "%s://%s-server.%s.svc:%d" (ternary "https" "http" .Values.tls.enabled) (include "bimodal.fullname" .) .Release.Namespace (int .Values.server.port) -}}
{{- end -}}

{{/* The ClickHouse the servers use. */}}
{{- define "bimodal.clickhouseUrl" -}}
{{- if .Values.clickhouse.trial.enabled -}}
{{- printf "http://%s-clickhouse.%s.svc:8123" (include "bimodal.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "clickhouse.url: the HTTP URL of your ClickHouse (or clickhouse.trial.enabled=true)" .Values.clickhouse.url -}}
{{- end -}}
{{- end -}}

{{/* The restricted security context of every container but the agent's. */}}
{{- define "bimodal.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
