{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "maintd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's resources. */}}
{{- define "maintd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "maintd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "maintd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "maintd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "maintd.labels" -}}
helm.sh/chart: {{ include "maintd.chart" . }}
{{ include "maintd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "maintd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "maintd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "maintd.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the store URL, or nothing when the embedded SQLite store is used. */}}
{{- define "maintd.databaseSecret" -}}
{{- if .Values.database.existingSecret }}
{{- .Values.database.existingSecret }}
{{- else if .Values.database.url }}
{{- include "maintd.fullname" . }}-database
{{- end }}
{{- end }}

{{- define "maintd.databaseSecretKey" -}}
{{- if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* Environment shared by the daemon and the CronJob. */}}
{{- define "maintd.env" -}}
- name: MAINTD_CONFIG
  value: /etc/maintd/maintd.yaml
- name: MAINTD_STATE_DIR
  value: /var/lib/maintd
- name: MAINTD_HTTP__PORT
  value: {{ .Values.http.port | quote }}
{{- if .Values.policy }}
- name: MAINTD_POLICY__PATH
  value: /etc/maintd/policy.yaml
{{- end }}
{{- with (include "maintd.databaseSecret" .) }}
- name: MAINTD_STORE__URL
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ include "maintd.databaseSecretKey" $ }}
{{- end }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: SPARK_LOCAL_DIRS
  value: /scratch
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes shared by the daemon and the CronJob: settings, state, scratch. */}}
{{- define "maintd.volumes" -}}
- name: config
  configMap:
    name: {{ include "maintd.fullname" . }}
- name: state
  emptyDir: {}
- name: scratch
  emptyDir:
    sizeLimit: {{ .Values.scratch.sizeLimit }}
{{- end }}

{{- define "maintd.volumeMounts" -}}
- name: config
  mountPath: /etc/maintd
  readOnly: true
- name: state
  mountPath: /var/lib/maintd
- name: scratch
  mountPath: /scratch
- name: scratch
  mountPath: /tmp
  subPath: tmp
{{- end }}
