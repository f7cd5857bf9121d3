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

{{/*
The provisioner image (a template, as in the Go chart: "{{ .Chart.AppVersion }}" works). No image is
published, so it must be set. A repository named like the Go provisioner's images (…local-volume-provisioner,
…local-volume-node-cleanup: the Go chart's registry.k8s.io and staging images, and any mirror of them) is
refused: the Go binary does not understand this chart's flags and would crash-loop on every node. An image of
ours pushed under such a name is allowed with imageIsLocalStaticProvisioner: true.
*/}}
{{- define "lsp.image" -}}
{{- include "lsp.checkImage" (list . (tpl (toString (.Values.image | default "")) .) "image") -}}
{{- end -}}

{{/* (list $ image valueName): the image, or a render failure naming the value. */}}
{{- define "lsp.checkImage" -}}
{{- $ := index . 0 -}}
{{- $image := index . 1 | trim -}}
{{- $key := index . 2 -}}
{{- if not $image -}}
{{- fail (printf "%s is not set, and no image of local-static-provisioner is published (an install without it would stall in ImagePullBackOff): build the image from this repository's Dockerfile (npm run build-image, or docker build -t <registry>/local-static-provisioner:%s .), push it to a registry your nodes pull from, and set %s, e.g. --set %s=<registry>/local-static-provisioner:%s (docs/helm.md)" $key $.Chart.AppVersion $key $key $.Chart.AppVersion) -}}
{{- end -}}
{{- $repository := regexReplaceAll ":[^/]*$" (regexReplaceAll "@.*$" $image "") "" -}}
{{- if and (or (hasSuffix "local-volume-provisioner" $repository) (hasSuffix "local-volume-node-cleanup" $repository)) (not (dig "imageIsLocalStaticProvisioner" false $.Values.AsMap)) -}}
{{- fail (printf "%s %q looks like the Go provisioner's image (its repository ends in %s): this chart passes local-static-provisioner's flags, which the Go binary does not have, so every pod would crash-loop. Set %s to your local-static-provisioner image; if this image really is local-static-provisioner pushed under that name, set imageIsLocalStaticProvisioner=true (docs/helm.md)" $key $image (base $repository) $key) -}}
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
The daemon refuses a configuration in which two classes' directories (hostDir or mountDir) are the same or one
lies inside the other (docs/configuration.md): each volume would be two PVs, or a tenant's entry inside one
class's volume a volume of the other. Such values would render, and every pod would stay not Ready with the
config rejected; they fail the render here instead, naming both classes.
*/}}
{{- define "lsp.checkClassDirs" -}}
{{- $dirs := list -}}
{{- range $i, $c := .Values.classes -}}
{{- if and $c $c.hostDir -}}
{{- $host := clean (toString $c.hostDir) -}}
{{- $dirs = append $dirs (dict "i" $i "name" (toString $c.name) "key" "hostDir" "dir" $host) -}}
{{- $mount := clean (toString (default $c.hostDir $c.mountDir)) -}}
{{- if ne $mount $host -}}
{{- $dirs = append $dirs (dict "i" $i "name" (toString $c.name) "key" "mountDir" "dir" $mount) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $b := $dirs -}}
{{- range $a := $dirs -}}
{{- if lt $a.i $b.i -}}
{{- $how := "" -}}
{{- if eq $a.dir $b.dir -}}{{- $how = "is the same directory as" -}}
{{- else if hasPrefix (printf "%s/" (trimSuffix "/" $a.dir)) $b.dir -}}{{- $how = "lies inside" -}}
{{- else if hasPrefix (printf "%s/" (trimSuffix "/" $b.dir)) $a.dir -}}{{- $how = "contains" -}}
{{- end -}}
{{- if $how -}}
{{- fail (printf "classes[%d] (%s): %s %s %s %s %s of classes[%d] (%s); the daemon refuses two classes whose directories overlap (the pods would never become Ready): give each class its own directory, e.g. /mnt/disks/<class> (docs/helm.md)" $b.i $b.name $b.key $b.dir $how $a.key $a.dir $a.i $a.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The hostPath volumes and mounts for the classes, as JSON {"volumes": [...], "mounts": [...]}:
- discoveryRoot (unless empty), once, at the same path, DirectoryOrCreate: a class whose hostDir is
  that directory or under it, seen at the same path (mountDir unset or equal), needs nothing more, so
  adding such a class is a ConfigMap change only (no pod template change, no restart: hot reload);
- any other class (the Go chart's layout, e.g. /mnt/fast-disks) gets its own volume, named after it,
  as the Go chart renders it;
- no two classes share or nest a directory (lsp.checkClassDirs: the daemon would refuse the config), and a
  class's mountDir cannot be the root's.
*/}}
{{- define "lsp.discoveryVolumes" -}}
{{- include "lsp.checkClassDirs" . -}}
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
