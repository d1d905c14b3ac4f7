{{/* The name prefix of every object: the release name, or fullnameOverride. */}}
{{- define "sharedcontent.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; the component is given as .component. */}}
{{- define "sharedcontent.labels" -}}
app.kubernetes.io/name: sharedcontent
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: sharedcontent
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The selector of one component's pods. */}}
{{- define "sharedcontent.selector" -}}
app.kubernetes.io/name: sharedcontent
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sharedcontent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The coordinator's URL, as the nodes reach it. */}}
{{- define "sharedcontent.coordinatorURL" -}}
{{- if .Values.coordinator.enabled -}}
{{ ternary "https" "http" .Values.tls.enabled }}://{{ include "sharedcontent.fullname" . }}-coordinator.{{ .Release.Namespace }}.svc:{{ .Values.coordinator.port }}
{{- else -}}
{{ required "coordinator.externalURL is required when coordinator.enabled is false" .Values.coordinator.externalURL }}
{{- end -}}
{{- end -}}

{{/* Refuse values that cannot work, before anything is applied. */}}
{{- define "sharedcontent.validate" -}}
{{- if and .Values.coordinator.ha.etcdEndpoints (lt (int .Values.coordinator.ha.replicas) 2) -}}
{{- fail "coordinator.ha.replicas: at least 2 with etcdEndpoints (a standby to take over)" -}}
{{- end -}}
{{- if and .Values.tls.nodeIdentity (not .Values.tls.clientCA) -}}
{{- fail "tls.nodeIdentity needs tls.clientCA: a certificate names its node only under mTLS" -}}
{{- end -}}
{{- if and .Values.tls.clientCA (not .Values.tls.enabled) -}}
{{- fail "tls.clientCA needs tls.enabled" -}}
{{- end -}}
{{- if not (or .Values.node.enabled .Values.coordinator.enabled) -}}
{{- fail "node.enabled and coordinator.enabled are both false: nothing to install" -}}
{{- end -}}
{{- end -}}

{{/* Whether nodes prove who they are (per-node tokens or certificates):
the coordinator then takes no shared token, only an admin token. */}}
{{- define "sharedcontent.nodeIdentities" -}}
{{- if or .Values.auth.nodeTokens.enabled .Values.tls.nodeIdentity -}}true{{- end -}}
{{- end -}}
