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
Every drop-in of the chart, as JSON: values.dropIns and the opt-in ones
that are enabled (virtualConsoles, cameras). The templates read it with
fromJson, so that the ConfigMap, the volume and --conf-dir agree.
*/}}
{{- define "cdi-bridge.dropIns" -}}
{{- $own := .Values.dropIns | default dict -}}
{{- $all := deepCopy $own -}}
{{- if .Values.virtualConsoles.enabled -}}
{{- if hasKey $own "tty.d/generic.conf" -}}
{{- fail "virtualConsoles.enabled, and dropIns has a tty.d/generic.conf of its own: keep one of the two" -}}
{{- end -}}
{{- $_ := set $all "tty.d/generic.conf" (include "cdi-bridge.virtualConsoles" .Values.virtualConsoles | fromJson) -}}
{{- end -}}
{{- if .Values.cameras.enabled -}}
{{- if hasKey $own "camera.d/endpoint.conf" -}}
{{- fail "cameras.enabled, and dropIns has a camera.d/endpoint.conf of its own: keep one of the two" -}}
{{- end -}}
{{- $_ := set $all "camera.d/endpoint.conf" (include "cdi-bridge.cameras" .Values.cameras | fromJson) -}}
{{- end -}}
{{- toJson $all -}}
{{- end }}

{{/*
The virtual consoles' drop-in (values.virtualConsoles): the host's
/dev/ttyN above numSystemReserved.
*/}}
{{- define "cdi-bridge.virtualConsoles" -}}
{{- $args := dict "root" "/" "stateDir" "/var/lib/cdi" "num_system_reserved" (int .numSystemReserved) -}}
{{- dict "cdiVersion" "0.1.0" "name" "Virtual consoles" "type" "tty" "plugin" "generic-tty" "args" $args | toJson -}}
{{- end }}

{{/*
The cameras' drop-in (values.cameras): the operator's own endpoints,
probed unless probe.tcp is false. The chart has no example ones to fall
back on: an empty list is an error, not a drop-in that offers nothing.
*/}}
{{- define "cdi-bridge.cameras" -}}
{{- if not .endpoints -}}
{{- fail "cameras.enabled: list your cameras in cameras.endpoints, each {id, url} (e.g. {id: door, url: \"rtsp://10.0.0.5/stream\"}); the chart ships none" -}}
{{- end -}}
{{- range $i, $e := .endpoints -}}
{{- if not (and (kindIs "map" $e) $e.id $e.url) -}}
{{- fail (printf "cameras.endpoints[%d]: want {id, url}, got %v" $i $e) -}}
{{- end -}}
{{- end -}}
{{- $args := dict "stateDir" "/var/lib/cdi" "capacity" (int .capacity) "probe" .probe "endpoints" .endpoints -}}
{{- dict "cdiVersion" "0.1.0" "name" "Network cameras" "type" "camera" "plugin" "endpoint" "args" $args | toJson -}}
{{- end }}

{{/*
The bridge's --conf-dir: the host's drop-ins, and the chart's when it has
any.
*/}}
{{- define "cdi-bridge.confDir" -}}
/etc/cdi{{ if include "cdi-bridge.dropIns" . | fromJson }}:/etc/cdi-chart{{ end }}
{{- end }}

{{/*
The namespaces of values.brokers, joined by commas; refused when
brokers.enabled lists none.
*/}}
{{- define "cdi-bridge.brokerNamespaces" -}}
{{- if not .Values.brokers.namespaces -}}
{{- fail "brokers.enabled: brokers.namespaces must list the namespaces whose Brokers the bridge acts on" -}}
{{- end -}}
{{ join "," .Values.brokers.namespaces }}
{{- end }}
