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

{{/*
The worker container's environment after its own per-pod names (POD_NAME, ETJ_WEB_HOST): where
the mounted Secrets are, the snapshot store's credentials, malloc arenas, extraEnv. The topics
Job (templates/topics-job.yaml) has exactly the same, so it reaches Kafka as the workers do.
*/}}
{{- define "etj.sharedEnv" -}}
# secrets are files of read-only Secret volumes; the env only says where
{{- with .Values.kafka.tls }}
{{- if .secretName }}
- name: ETJ_KAFKA_TLS
  value: "true"
{{- if .caKey }}
- name: ETJ_KAFKA_TLS_CA_FILE
  value: /etc/etj/kafka-tls/{{ .caKey }}
{{- end }}
{{- if .certKey }}
- name: ETJ_KAFKA_TLS_CERT_FILE
  value: /etc/etj/kafka-tls/{{ .certKey }}
- name: ETJ_KAFKA_TLS_KEY_FILE
  value: /etc/etj/kafka-tls/{{ required "kafka.tls.keyKey: the key of the client certificate's private key" .keyKey }}
{{- end }}
{{- if .keyPasswordKey }}
- name: ETJ_KAFKA_TLS_KEY_PASSWORD_FILE
  value: /etc/etj/kafka-tls/{{ .keyPasswordKey }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.kafka.sasl.secretName }}
- name: ETJ_KAFKA_SASL_PASSWORD_FILE
  value: /etc/etj/kafka-sasl/{{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if .Values.web.auth.secretName }}
- name: ETJ_VIEWS_TOKEN_FILE
  value: /etc/etj/views-auth/{{ .Values.web.auth.tokenKey }}
{{- end }}
{{- with .Values.snapshots.credentialsSecret }}
# the snapshot store's credentials (config.snapshot_url), read by boto3
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: AWS_SECRET_ACCESS_KEY
{{- if not $.Values.snapshots.endpointUrl }}
- name: AWS_ENDPOINT_URL
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: AWS_ENDPOINT_URL
      optional: true
{{- end }}
{{- end }}
{{- with .Values.snapshots.endpointUrl }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.snapshots.region }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
{{- with .Values.mallocArenaMax }}
# fewer malloc arenas: memory one thread frees is reused by the others
- name: MALLOC_ARENA_MAX
  value: {{ . | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{/*
The volume mounts of the worker container past its datadir and /tmp (the topics Job's too). The
`joins` volume is each workload's own: the topics Job runs before the release's ConfigMaps exist.
*/}}
{{- define "etj.sharedVolumeMounts" -}}
{{- if .Values.joins }}
- name: joins
  mountPath: {{ include "etj.joinsDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.secretName }}
- name: kafka-tls
  mountPath: /etc/etj/kafka-tls
  readOnly: true
{{- end }}
{{- if .Values.kafka.sasl.secretName }}
- name: kafka-sasl
  mountPath: /etc/etj/kafka-sasl
  readOnly: true
{{- end }}
{{- if .Values.web.auth.secretName }}
- name: views-auth
  mountPath: /etc/etj/views-auth
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{/* The volumes behind etj.sharedVolumeMounts. */}}
{{- define "etj.sharedVolumes" -}}
{{- if .Values.kafka.tls.secretName }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.secretName }}
    defaultMode: 0440  # owner root, group fsGroup: the worker reads, nobody writes
{{- end }}
{{- if .Values.kafka.sasl.secretName }}
- name: kafka-sasl
  secret:
    secretName: {{ .Values.kafka.sasl.secretName }}
    defaultMode: 0440
{{- end }}
{{- if .Values.web.auth.secretName }}
- name: views-auth
  secret:
    secretName: {{ .Values.web.auth.secretName }}
    defaultMode: 0440
{{- end }}
{{- with .Values.extraVolumes }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{/*
The worker's ETJ_ settings, the data of its ConfigMap (and of the topics Job's copy). Per-pod
values (ETJ_WEB_HOST) are env vars of the pod.
*/}}
{{- define "etj.settingsData" -}}
{{- range $key, $value := .Values.config }}
{{- if not (kindIs "invalid" $value) }}
ETJ_{{ upper $key }}: {{ include "etj.envValue" $value | quote }}
{{- end }}
{{- end }}
ETJ_DATADIR: {{ .Values.persistence.mountPath | quote }}
ETJ_WEB_PORT: {{ include "etj.envValue" .Values.web.port | quote }}
ETJ_WEB_BIND: "0.0.0.0"
{{- if .Values.joins }}
ETJ_JOINS_FILE: {{ printf "%s/joins.json" (include "etj.joinsDir" .) | quote }}
{{- end }}
{{- end -}}

{{/*
The join specs of value `joins` (docs/joins/declarative.md): given as a list (or
`{"joins": [...]}`) they are written as JSON; given as a string (`--set-file joins=joins.json`)
they are written as they are. Mounted read-only at etj.joinsDir, named by ETJ_JOINS_FILE.
*/}}
{{- define "etj.joinsDir" -}}
/etc/etj/joins
{{- end -}}

{{- define "etj.joinsName" -}}
{{- printf "%s-joins" (include "etj.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "etj.joinsJson" -}}
{{- if and .Values.joins .Values.config.joins_file -}}
{{- fail "give the join specs either as `joins` or as a file of your own (`config.joins_file` with extraVolumes), not both" -}}
{{- end -}}
{{- if kindIs "string" .Values.joins -}}
{{- .Values.joins -}}
{{- else -}}
{{- toPrettyJson .Values.joins -}}
{{- end -}}
{{- end -}}

{{/*
Labels of the topics Job and its pod. Not the workers' selector labels (app.kubernetes.io/name
differs): its pod must not be taken for a worker by the Services, the PodDisruptionBudget, the
NetworkPolicy or the PodMonitor.
*/}}
{{- define "etj.topicsJobLabels" -}}
helm.sh/chart: {{ include "etj.chart" . }}
app.kubernetes.io/name: {{ printf "%s-topics" (include "etj.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: topics
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: etj
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The topics Job's ServiceAccount: at install it runs before the chart's own exists, so it takes
`topicsJob.serviceAccountName`, else a ServiceAccount the chart does not create
(`serviceAccount.name` with `serviceAccount.create=false`), else the namespace's `default`.
*/}}
{{- define "etj.topicsJobServiceAccountName" -}}
{{- if .Values.topicsJob.serviceAccountName -}}
{{- .Values.topicsJob.serviceAccountName -}}
{{- else if not .Values.serviceAccount.create -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/*
"true" when a monitoring.coreos.com/v1 object of kind $kind is to be made: its value `enabled`
true, or null (unset) and the cluster has the CRD (`helm install` asks the cluster; `helm
template` knows it only from `--api-versions monitoring.coreos.com/v1/<Kind>`).
Called with (list $enabled "Kind" $).
*/}}
{{- define "etj.monitoringOn" -}}
{{- $enabled := index . 0 -}}
{{- $kind := index . 1 -}}
{{- $root := index . 2 -}}
{{- if kindIs "invalid" $enabled -}}
{{- if $root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) -}}true{{- end -}}
{{- else if $enabled -}}
true
{{- end -}}
{{- end -}}

{{/*
The label matchers of this release's worker series in PromQL: its namespace and its pods
(<fullname>-<ordinal>). The PodMonitor's targets carry both, and so do kube-state-metrics'
series about the pods, so one selector serves both.
*/}}
{{- define "etj.promSelector" -}}
namespace="{{ .Release.Namespace }}", pod=~"{{ include "etj.fullname" . | replace "." "[.]" }}-[0-9]+"
{{- end -}}
