{{/*
The image both containers run: repository:tag, the tag defaulting to the
chart's appVersion.
*/}}
{{- define "cdi-bridge.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The labels of every object, and the DaemonSet's selector: one label, so
that the objects match what the kustomize layout always had (a selector
cannot change once the DaemonSet exists).
*/}}
{{- define "cdi-bridge.labels" -}}
app.kubernetes.io/name: cdi-bridge
{{- end }}

{{/*
The drop-in file names the ConfigMap holds, checked: "<type>.d/<name>.conf",
as the bridge reads them. A ConfigMap key cannot hold "/", so the key is
the name with "/" as "_", and the volume puts it back at the path.
*/}}
{{- define "cdi-bridge.dropInKey" -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9_-]*\\.d/[A-Za-z0-9][A-Za-z0-9._-]*\\.conf$" .) -}}
{{- fail (printf "dropIns: %q is not <type>.d/<name>.conf" .) -}}
{{- end -}}
{{ replace "/" "_" . }}
{{- end }}

{{/*
The bridge's --conf-dir: the host's drop-ins, and the chart's when it has
any.
*/}}
{{- define "cdi-bridge.confDir" -}}
/etc/cdi{{ if .Values.dropIns }}:/etc/cdi-chart{{ end }}
{{- end }}
