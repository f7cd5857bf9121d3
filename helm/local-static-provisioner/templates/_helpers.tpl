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

{{/*
The hostPath volumes and mounts for the classes, as JSON {"volumes": [...], "mounts": [...]}:
- discoveryRoot (unless empty), once, at the same path, DirectoryOrCreate: a class whose hostDir is
  that directory or under it, seen at the same path (mountDir unset or equal), needs nothing more, so
  adding such a class is a ConfigMap change only (no pod template change, no restart: hot reload);
- any other class (the Go chart's layout, e.g. /mnt/fast-disks) gets its own volume, named after it,
  as the Go chart renders it;
- one volume per host path and one mount per container path: two classes sharing a directory share
  its volume; two host directories at one mountDir fail the render.
*/}}
{{- define "lsp.discoveryVolumes" -}}
{{- $root := "" -}}
{{- with .Values.discoveryRoot -}}
{{- $root = clean (toString .) -}}
{{- if or (not (isAbs $root)) (eq $root "/") -}}
{{- fail (printf "discoveryRoot %q must be an absolute directory other than / (or empty to mount each class on its own)" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- $volumes := list -}}
{{- $mounts := list -}}
{{- $hostOf := dict -}}{{- /* mountPath -> host path mounted there */ -}}
{{- $volumeOf := dict -}}{{- /* host path -> volume name */ -}}
{{- if $root -}}
{{- $volumes = append $volumes (dict "name" "discovery-root" "hostPath" (dict "path" $root "type" "DirectoryOrCreate")) -}}
{{- $mounts = append $mounts (dict "name" "discovery-root" "mountPath" $root "mountPropagation" "HostToContainer") -}}
{{- $_ := set $hostOf $root $root -}}
{{- $_ := set $volumeOf $root "discovery-root" -}}
{{- end -}}
{{- range $i, $c := .Values.classes -}}
{{- $host := clean (toString (required (printf "classes[%d] (%s): hostDir is required" $i $c.name) $c.hostDir)) -}}
{{- $mount := clean (toString (default $c.hostDir $c.mountDir)) -}}
{{- $underRoot := and $root (or (eq $host $root) (hasPrefix (printf "%s/" $root) $host)) -}}
{{- if not (and $underRoot (eq $mount $host)) -}}
{{- if hasKey $hostOf $mount -}}
{{- if ne (index $hostOf $mount) $host -}}
{{- fail (printf "classes[%d] (%s): mountDir %s is already where %s is mounted; give the class another mountDir" $i $c.name $mount (index $hostOf $mount)) -}}
{{- end -}}
{{- else -}}
{{- if not (hasKey $volumeOf $host) -}}
{{- $_ := set $volumeOf $host (toString $c.name) -}}
{{- $volumes = append $volumes (dict "name" (toString $c.name) "hostPath" (dict "path" $host)) -}}
{{- end -}}
{{- $_ := set $hostOf $mount $host -}}
{{- $mounts = append $mounts (dict "name" (index $volumeOf $host) "mountPath" $mount "mountPropagation" "HostToContainer") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "volumes" $volumes "mounts" $mounts) -}}
{{- end -}}
