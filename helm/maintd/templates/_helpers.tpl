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

{{/* The Deployment strategy: updateStrategy.type, else RollingUpdate with a shared store and Recreate without. */}}
{{- define "maintd.strategyType" -}}
{{- if .Values.updateStrategy.type }}{{ .Values.updateStrategy.type }}
{{- else if (include "maintd.databaseSecret" .) }}RollingUpdate
{{- else }}Recreate
{{- end }}
{{- end }}

{{/* maintd.yaml: values.config, with the Spark settings of executors on Kubernetes where config sets none. */}}
{{- define "maintd.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if .Values.sparkOnKubernetes.enabled }}
{{- $k8s := .Values.sparkOnKubernetes }}
{{- $conf := dict
      "spark.kubernetes.namespace" .Release.Namespace
      "spark.kubernetes.container.image" $k8s.executorImage
      "spark.kubernetes.authenticate.driver.serviceAccountName" (include "maintd.serviceAccountName" .)
      "spark.driver.port" (toString $k8s.driverPort)
      "spark.driver.blockManager.port" (toString $k8s.blockManagerPort)
      "spark.kubernetes.executor.label.app.kubernetes.io/instance" .Release.Name }}
{{- $spark := dict "master" "k8s://https://kubernetes.default.svc" "conf" $conf }}
{{- $config = merge $config (dict "spark" $spark) }}
{{- end }}
{{- toYaml $config }}
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
- name: HOME
  value: /home/maintd
- name: TMPDIR
  value: /tmp
{{- include "maintd.objectStoreEnv" . }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes shared by the daemon and the CronJob: settings, state, scratch, temporary files, home; extra ones. */}}
{{- define "maintd.volumes" -}}
- name: config
  configMap:
    name: {{ include "maintd.fullname" . }}
- name: state
  emptyDir: {}
- name: scratch
  emptyDir:
    sizeLimit: {{ .Values.scratch.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
- name: home
  emptyDir:
    sizeLimit: {{ .Values.home.sizeLimit }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "maintd.volumeMounts" -}}
- name: config
  mountPath: /etc/maintd
  readOnly: true
- name: state
  mountPath: /var/lib/maintd
- name: scratch
  mountPath: /scratch
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /home/maintd
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The object store's credentials (from objectStore.existingSecret) and endpoint, as the standard variables. */}}
{{- define "maintd.objectStoreEnv" -}}
{{- $os := .Values.objectStore | default dict }}
{{- with $os.existingSecret }}
{{- $secret := . }}
{{- range $name, $key := $os.secretKeys }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
{{- end }}
{{- range $name, $key := $os.optionalSecretKeys }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- end }}
{{- with $os.region }}
- name: AWS_REGION
  value: {{ . | quote }}
{{- end }}
{{- with $os.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- if $os.allowHttp }}
- name: AWS_ALLOW_HTTP
  value: "true"
{{- end }}
{{- end }}
