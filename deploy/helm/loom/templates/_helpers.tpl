{{/*
The chart's name, or nameOverride.
*/}}
{{- define "loom.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A release-qualified name for every object (63 characters at most: a DNS label).
The release name alone when it already contains the chart's name.
*/}}
{{- define "loom.fullname" -}}
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

{{- define "loom.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The standard labels (app.kubernetes.io/*) of every object.
*/}}
{{- define "loom.labels" -}}
helm.sh/chart: {{ include "loom.chart" . }}
{{ include "loom.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: server
app.kubernetes.io/part-of: loom
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The labels selectors match on: never change them in an upgrade (a Deployment's selector is
immutable).
*/}}
{{- define "loom.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loom.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "loom.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "loom.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "loom.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The JWT Secret in use, as "secretName key envVar", or "" when authentication is off.
Both kinds at once is an error.
*/}}
{{- define "loom.jwt" -}}
{{- $s := .Values.auth.jwtSecret }}
{{- $p := .Values.auth.jwtPublicKey }}
{{- if and $s.secretName $p.secretName }}
{{- fail "auth: set jwtSecret.secretName or jwtPublicKey.secretName, not both" }}
{{- else if $s.secretName }}
{{- printf "%s %s LOOM_AUTH__JWT_SECRET_FILE" $s.secretName $s.key }}
{{- else if $p.secretName }}
{{- printf "%s %s LOOM_AUTH__JWT_PUBLIC_KEY_FILE" $p.secretName $p.key }}
{{- end }}
{{- end }}

{{/*
The probe command: `loom probe --live` or `--ready`. It runs in the server's container,
with the server's environment: the port (LOOM_SERVER__PORT), TLS when
LOOM_SERVER__TLS_CERT_FILE is set, the CA from LOOM_PROBE__CA_FILE.
*/}}
{{- define "loom.probeCommand" -}}
- loom
- probe
- {{ .mode }}
{{- if and .root.Values.tls.secretName (ne .root.Values.probe.authority "localhost") }}
- --authority
- {{ .root.Values.probe.authority | quote }}
{{- end }}
{{- end }}
