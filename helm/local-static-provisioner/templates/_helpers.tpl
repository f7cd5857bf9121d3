{{/* Chart name, or nameOverride (the app.kubernetes.io/name label). */}}
{{- define "lsp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Object name prefix. Computed exactly as the Go provisioner's chart does (same
rule for fullnameOverride, and for a release name that already contains the
chart name), so switching charts keeps every object name.
*/}}
{{- define "lsp.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "lsp.name" . -}}
{{- $full := ternary .Release.Name (printf "%s-%s" .Release.Name $name) (contains $name .Release.Name) -}}
{{- $full | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lsp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The DaemonSet selector: never change it (a selector is immutable). */}}
{{- define "lsp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lsp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lsp.labels" -}}
helm.sh/chart: {{ include "lsp.chart" . }}
{{ include "lsp.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "lsp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lsp.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lsp.configMapName" -}}
{{- printf "%s-config" (include "lsp.fullname" .) -}}
{{- end -}}

{{/* The provisioner image (a template, as in the Go chart: "{{ .Chart.AppVersion }}" works). */}}
{{- define "lsp.image" -}}
{{- $image := tpl (toString .Values.image) . -}}
{{- if regexMatch "(^|/)sig-storage/local-volume-provisioner(:|@|$)" $image -}}
{{- fail (printf "image %q is the Go provisioner's image; this chart runs local-static-provisioner: remove the image value or set it to a local-static-provisioner image (docs/helm.md)" $image) -}}
{{- end -}}
{{- $image -}}
{{- end -}}

{{/* The StorageClass names the node-cleanup controller acts on: its own list, else every class of the chart. */}}
{{- define "lsp.nodeCleanupClasses" -}}
{{- $names := list -}}
{{- if .Values.nodeCleanup.storageClassNames -}}
{{- $names = .Values.nodeCleanup.storageClassNames -}}
{{- else -}}
{{- range .Values.classes }}{{ $names = append $names .name }}{{ end -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/* The node-cleanup pods' labels: a name of their own, so neither the DaemonSet nor the metrics Service selects them. */}}
{{- define "lsp.nodeCleanupSelectorLabels" -}}
app.kubernetes.io/name: {{ include "lsp.name" . | trunc 50 | trimSuffix "-" }}-node-cleanup
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-cleanup
{{- end -}}

{{/* (list probe path): the probe, with GET <path> on the metrics port when it has no handler of its own. */}}
{{- define "lsp.probe" -}}
{{- $p := deepCopy (index . 0 | default dict) -}}
{{- if not (or $p.httpGet $p.tcpSocket $p.exec $p.grpc) -}}
{{- $_ := set $p "httpGet" (dict "path" (index . 1) "port" "metrics") -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}
