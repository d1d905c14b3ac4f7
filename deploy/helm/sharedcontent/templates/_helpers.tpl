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
app.kubernetes.io/version: {{ include "sharedcontent.tag" .root | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The selector of one component's pods. */}}
{{- define "sharedcontent.selector" -}}
app.kubernetes.io/name: sharedcontent
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image's tag: image.tag, else the appVersion that make helm-package
stamps (IMAGE_VERSION, the tag make image gives the image it builds). The
chart's source carries no appVersion, since it names no build: rendering
it without image.tag fails rather than name an image nobody built. */}}
{{- define "sharedcontent.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | required "image.tag is required: give the tag `make image` printed for the image (IMAGE_VERSION, by default git describe --tags --always --dirty), e.g. --set image.tag=$(git describe --tags --always --dirty), or install the chart `make helm-package` packed with it (docs/helm.md \"Install\")" -}}
{{- end -}}

{{- define "sharedcontent.image" -}}
{{ .Values.image.repository }}:{{ include "sharedcontent.tag" . }}
{{- end -}}

{{/* The coordinator's URL, as the nodes reach it: its Service, or with
replicas on etcd each replica's own URL, as it advertises itself (a node
follows a not_leader hint only to a URL of its list). */}}
{{- define "sharedcontent.coordinatorURL" -}}
{{- $scheme := ternary "https" "http" .Values.tls.enabled -}}
{{- $name := printf "%s-coordinator" (include "sharedcontent.fullname" .) -}}
{{- if and .Values.coordinator.enabled .Values.coordinator.ha.etcdEndpoints -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.coordinator.ha.replicas) -}}
{{- $urls = append $urls (printf "%s://%s-%d.%s-peers.%s.svc:%v" $scheme $name $i $name $.Release.Namespace $.Values.coordinator.port) -}}
{{- end -}}
{{ join "," $urls }}
{{- else if .Values.coordinator.enabled -}}
{{ $scheme }}://{{ $name }}.{{ .Release.Namespace }}.svc:{{ .Values.coordinator.port }}
{{- else -}}
{{ required "coordinator.externalURL is required when coordinator.enabled is false" .Values.coordinator.externalURL }}
{{- end -}}
{{- end -}}

{{/* Refuse values that cannot work, before anything is applied. */}}
{{- define "sharedcontent.validate" -}}
{{- if and .Values.coordinator.ha.etcdEndpoints (lt (int .Values.coordinator.ha.replicas) 2) -}}
{{- fail "coordinator.ha.replicas: at least 2 with etcdEndpoints (a standby to take over)" -}}
{{- end -}}
{{- if .Values.coordinator.ha.etcdTLSSecret -}}
{{- range .Values.coordinator.ha.etcdEndpoints -}}
{{- if hasPrefix "http://" . -}}
{{- fail (printf "coordinator.ha.etcdTLSSecret needs https:// etcdEndpoints, not %s" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tls.nodeIdentity (not .Values.tls.clientCA) -}}
{{- fail "tls.nodeIdentity needs tls.clientCA: a certificate names its node only under mTLS" -}}
{{- end -}}
{{- if and .Values.tls.clientCA (not .Values.tls.enabled) -}}
{{- fail "tls.clientCA needs tls.enabled" -}}
{{- end -}}
{{- if not (has .Values.node.mode (list "host" "pod")) -}}
{{- fail (printf "node.mode %q: host (the daemon as a host service, installed by the DaemonSet) or pod (the daemon in the DaemonSet's pod)" .Values.node.mode) -}}
{{- end -}}
{{- if not (or .Values.node.enabled .Values.coordinator.enabled) -}}
{{- fail "node.enabled and coordinator.enabled are both false: nothing to install" -}}
{{- end -}}
{{- /* A delete lease must end before a cut-off node may fail open
(docs/design.md §8.8): lease-ttl < session-ttl/3 + session-ttl +
session-ttl/10 + 2s. The coordinator refuses to start otherwise. */ -}}
{{- $lease := 15000 -}}
{{- $session := 15000 -}}
{{- range .Values.coordinator.extraArgs -}}
{{- if regexMatch "^--?lease-ttl=" . -}}
{{- $lease = include "sharedcontent.durationMs" (regexReplaceAll "^--?lease-ttl=" . "") | int64 -}}
{{- else if regexMatch "^--?session-ttl=" . -}}
{{- $session = include "sharedcontent.durationMs" (regexReplaceAll "^--?session-ttl=" . "") | int64 -}}
{{- end -}}
{{- end -}}
{{- $failOpen := add (div $session 3) $session (div $session 10) 2000 -}}
{{- if ge $lease $failOpen -}}
{{- fail (printf "coordinator.extraArgs: --lease-ttl (%dms) must be shorter than the nodes' fail-open delay at --session-ttl (%dms), session-ttl/3 + session-ttl + session-ttl/10 + 2s = %dms: a longer delete lease could outlive a cut-off node's fail-open (docs/design.md §8.8); lower --lease-ttl or raise --session-ttl" $lease $session $failOpen) -}}
{{- end -}}
{{- end -}}

{{/* The milliseconds of a Go duration written in whole numbers of h, m,
s and ms (e.g. 15s, 1m30s, 500ms). */}}
{{- define "sharedcontent.durationMs" -}}
{{- $parts := regexFindAll "[0-9]+(ms|h|m|s)" . -1 -}}
{{- if or (not $parts) (ne (join "" $parts) .) -}}
{{- fail (printf "cannot read the duration %q in coordinator.extraArgs: write whole numbers with units h, m, s, ms (e.g. 15s, 1m30s, 500ms)" .) -}}
{{- end -}}
{{- $total := 0 -}}
{{- range $parts -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $unit := trimPrefix $n . -}}
{{- $total = add $total (mul (int64 $n) (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Whether nodes prove who they are (per-node tokens or certificates):
the coordinator then takes no shared token, only an admin token. */}}
{{- define "sharedcontent.nodeIdentities" -}}
{{- if or .Values.auth.nodeTokens.enabled .Values.tls.nodeIdentity -}}true{{- end -}}
{{- end -}}

{{/* The node daemon's flags, one "- --flag=value" line each. In host mode
(.host) they name the host's files: the installer writes them to the host
service's environment file (docs/helm.md "Host mode"). */}}
{{- define "sharedcontent.nodeDaemonArgs" -}}
{{- $v := .root.Values -}}
- --root={{ $v.node.sharedRoot }}
- --address={{ trimSuffix "/" $v.node.socketDir }}/sharedcontent.sock
- --state-dir={{ trimSuffix "/" $v.node.stateDir }}/node
- --coordinator={{ $v.node.coordinatorURL | default (include "sharedcontent.coordinatorURL" .root) }}
{{- if .host }}
- --node-id=$(NODE_NAME)
{{- end }}
{{- if $v.auth.nodeTokens.enabled }}
- --node-token-file={{ $v.auth.nodeTokens.hostPath }}
{{- else if and $v.auth.tokenSecret (not $v.tls.nodeIdentity) }}
- --auth-token-file={{ ternary "/etc/sharedcontent/auth-token" "/etc/sharedcontent/token/token" .host }}
{{- end }}
{{- if $v.tls.enabled }}
- --coordinator-ca={{ ternary "/etc/sharedcontent/coordinator-ca.crt" "/etc/sharedcontent/tls-ca/ca.crt" .host }}
{{- end }}
{{- if $v.tls.clientCA }}
- --node-cert={{ trimSuffix "/" $v.tls.nodeCertHostPath }}/tls.crt
- --node-key={{ trimSuffix "/" $v.tls.nodeCertHostPath }}/tls.key
{{- end }}
- --metrics-listen=0.0.0.0:{{ $v.node.metricsPort }}
- --log-level={{ $v.node.logLevel }}
{{- if not .host }}
# Once serving, tell containerd's CRI to reload every image it
# could not read while this pod was down (docs/helm.md).
{{- end }}
- --containerd-address={{ $v.node.containerdSocket }}
{{- range $v.node.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}
