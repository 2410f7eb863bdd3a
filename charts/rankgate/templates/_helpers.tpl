{{/* The controller's namespace. */}}
{{- define "rankgate.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* The controller's service account. */}}
{{- define "rankgate.serviceAccount" -}}
{{- required "serviceAccount.name is required" .Values.serviceAccount.name -}}
{{- end -}}

{{/* The user name the API server gives the controller, as a CEL
concatenation of quoted literals (the form configs/deploy ships). */}}
{{- define "rankgate.controllerUserCEL" -}}
'system:serviceaccount:' + '{{ include "rankgate.namespace" . }}' + ':' + '{{ include "rankgate.serviceAccount" . }}'
{{- end -}}

{{/* Labels on every object. */}}
{{- define "rankgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: rankgate
{{- end -}}

{{- define "rankgate.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* NAME=QUANTITY,... of a resource map, sorted by name. */}}
{{- define "rankgate.quantities" -}}
{{- $out := list -}}
{{- range $k, $v := . -}}
{{- $out = append $out (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}
