{{/* The name of every object: fullnameOverride, else the release name when it contains
"eventpipe", else RELEASE-eventpipe; at most 63 characters. */}}
{{- define "eventpipe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "eventpipe" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-eventpipe" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pod (stable across upgrades). */}}
{{- define "eventpipe.selectorLabels" -}}
app.kubernetes.io/name: eventpipe
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels. */}}
{{- define "eventpipe.labels" -}}
{{ include "eventpipe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end -}}

{{/* The service account the pod runs as. */}}
{{- define "eventpipe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "eventpipe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* --delivery: the delivery value, else at-least-once with leader election (a candidate is a
hot standby, and takes over from the position the leader recorded in the Lease), else wait. */}}
{{- define "eventpipe.delivery" -}}
{{- if .Values.delivery -}}
{{- .Values.delivery -}}
{{- else if .Values.leaderElection.enabled -}}
at-least-once
{{- else -}}
wait
{{- end -}}
{{- end -}}
