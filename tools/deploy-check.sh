#!/usr/bin/env bash
# Checks deploy/ without a cluster: the chart lints clean (helm lint --strict) with its default
# values and each deploy/helm/bimodal/ci/*-values.yaml; deploy/kubernetes/ is what `make
# manifests` renders from it now; every rendered manifest decodes strictly into the Kubernetes
# API types (deploy/validate: unknown or mistyped fields are errors) and passes the API server's
# checks that the validator knows; the chart's copy of the default alert rules is the server's.
# Usage: tools/deploy-check.sh [--write]   (--write renders deploy/kubernetes/ instead of comparing)
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${HELM:-target/tools/bin/helm}
VALIDATE=target/tools/bin/k8s-validate
CHART=deploy/helm/bimodal

# The Kubernetes version the manifests are rendered for and validated against (deploy/validate's
# k8s.io/api); the chart needs 1.25 or later.
KUBE_VERSION=1.34.0

render() { # render OUT [VALUES]
	"$HELM" template bimodal "$CHART" --namespace bimodal --kube-version "$KUBE_VERSION" ${2:+-f "$2"} >"$1"
}

if [ "${1:-}" = --write ]; then
	cp server/rules/default.yaml "$CHART/files/default-rules.yaml"
	render deploy/kubernetes/bimodal.yaml
	render deploy/kubernetes/bimodal-trial.yaml "$CHART/ci/trial-values.yaml"
	echo "deploy-check: rendered deploy/kubernetes/bimodal.yaml and bimodal-trial.yaml"
	exit 0
fi

if ! cmp -s server/rules/default.yaml "$CHART/files/default-rules.yaml"; then
	echo "deploy-check: $CHART/files/default-rules.yaml differs from server/rules/default.yaml: run make manifests" >&2
	exit 1
fi
(cd deploy/validate && go vet ./... && go test -count=1 ./... && go build -o "../../$VALIDATE" .)

"$HELM" lint --strict "$CHART"
for values in "$CHART"/ci/*-values.yaml; do
	"$HELM" lint --strict "$CHART" -f "$values"
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
render "$out/bimodal.yaml"
render "$out/bimodal-trial.yaml" "$CHART/ci/trial-values.yaml"
if ! diff -ru deploy/kubernetes "$out" >&2; then
	echo "deploy-check: deploy/kubernetes/ is not what the chart renders: run make manifests" >&2
	exit 1
fi
for values in "$CHART"/ci/*-values.yaml; do
	render "$out/$(basename "$values" -values.yaml).rendered.yaml" "$values"
done
"$VALIDATE" "$out"/*.yaml
