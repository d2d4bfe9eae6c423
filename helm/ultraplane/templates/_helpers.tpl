{{/*
Shared names, labels and pod fragments. Every component (operator, simulator, api) runs the
same image with its own command, ServiceAccount and RBAC, so these helpers take the component
name and keep the three Deployments identical in everything else (security, volumes, image).
*/}}

{{- define "ultraplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ultraplane.fullname" -}}
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

{{/* "<fullname>-<component>", kept under the 63-character name limit. */}}
{{- define "ultraplane.componentName" -}}
{{- printf "%s-%s" (include "ultraplane.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component }}
{{- end }}

{{- define "ultraplane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ultraplane.labels" -}}
helm.sh/chart: {{ include "ultraplane.chart" . }}
app.kubernetes.io/name: {{ include "ultraplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ultraplane
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component; never change them (Deployment selectors are immutable). */}}
{{- define "ultraplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ultraplane.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "ultraplane.componentLabels" -}}
{{ include "ultraplane.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "ultraplane.serviceAccountName" -}}
{{- $sa := index .root.Values .component "serviceAccount" }}
{{- if $sa.create }}
{{- default (include "ultraplane.componentName" .) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{- define "ultraplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Pod spec fields shared by every component. */}}
{{- define "ultraplane.podCommon" -}}
serviceAccountName: {{ include "ultraplane.serviceAccountName" . }}
automountServiceAccountToken: true
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- $values := index .root.Values .component }}
{{- with $values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The only writable path: every root filesystem is read-only. */}}
{{- define "ultraplane.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end }}

{{/* Container fields shared by every component. */}}
{{- define "ultraplane.containerCommon" -}}
image: {{ include "ultraplane.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
{{- $values := index .root.Values .component }}
resources:
  {{- toYaml $values.resources | nindent 2 }}
{{- end }}

{{/* The pod's own name and namespace (the operator's peering identity and its home). */}}
{{- define "ultraplane.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- with (index .root.Values .component).extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "ultraplane.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- end }}
