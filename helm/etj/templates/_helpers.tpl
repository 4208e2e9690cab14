{{/* Names, labels and shared snippets of the etj chart. */}}

{{- define "etj.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* release-chart, or the release alone when it already contains the chart name */}}
{{- define "etj.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service: it gives every pod a stable DNS name (routed views use them). */}}
{{- define "etj.headlessName" -}}
{{- printf "%s-headless" (include "etj.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "etj.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "etj.selectorLabels" -}}
app.kubernetes.io/name: {{ include "etj.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "etj.labels" -}}
helm.sh/chart: {{ include "etj.chart" . }}
{{ include "etj.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: etj
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "etj.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "etj.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "etj.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
A value as an environment variable string. Helm reads YAML numbers as float64, and
`toString 3600000` would give "3.6e+06": whole numbers are printed as integers.
*/}}
{{- define "etj.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- int64 . | toString -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}
