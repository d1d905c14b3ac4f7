#!/usr/bin/env bash
# Build the Kubernetes binaries of make e2e-k8s from k8s.io/kubernetes at the
# version integration/tools/k8s/go.mod pins: kubelet, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy and kubectl.
#
#   integration/tools/k8s.sh [outdir]     (default: $REPO/.cache/bin)
#
# k8s/go.mod maps every k8s.io staging module to its release (v0.X.Y for
# v1.X.Y) with replace, because k8s.io/kubernetes's own go.mod points them at
# ./staging, which a dependency's replace cannot reach. The version is stamped
# as Kubernetes' own build does (component-base/version), so that kubectl,
# the apiserver and Helm's kubeVersion checks see v1.X.Y, not v0.0.0.
# CGO_ENABLED=0. Skipped when every binary exists and the stamp matches the
# inputs; safe to run concurrently (flock). Cold, on 2 cores, this takes
# 5 to 50 minutes depending on load (docs/e2e.md); CI caches .cache/bin.
#
# Environment:
#   FORCE=1    rebuild even if the stamp matches
set -euo pipefail

start=$(date +%s.%N)
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$TOOLS/../.." && pwd -P)
OUT=${1:-$REPO/.cache/bin}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)

PKG=k8s.io/kubernetes
BINS="kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl"
export GOWORK=off GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly" CGO_ENABLED=0

VERSION=$(awk '$1 == "require" && $2 == "'"$PKG"'" {print $3} $1 == "'"$PKG"'" {print $2}' "$TOOLS/k8s/go.mod" | head -n1)
[ -n "$VERSION" ] || { echo "k8s.sh: cannot find $PKG in $TOOLS/k8s/go.mod" >&2; exit 1; }
MAJOR=${VERSION#v}; MAJOR=${MAJOR%%.*}
MINOR=${VERSION#v*.}; MINOR=${MINOR%%.*}
GOVER=$(go env GOVERSION)
SUM=$(cd "$TOOLS" && sha256sum k8s/go.mod k8s/go.sum k8s.sh | sha256sum | cut -d' ' -f1)
STAMP_WANT="kubernetes=$VERSION go=$GOVER bins=$BINS inputs=$SUM"
STAMP="$OUT/.k8s-tools.stamp"

exec 9>"$OUT/.k8s-tools.lock"
flock 9

elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1fs", e-s}'; }

have_all() { for b in $BINS; do [ -x "$OUT/$b" ] || return 1; done; }
if [ "${FORCE:-0}" != 1 ] && have_all && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ]; then
	echo "k8s.sh: Kubernetes $VERSION binaries up to date in $OUT ($(elapsed "$start"))"
	exit 0
fi

tmp=$(mktemp -d "$OUT/.build-k8s.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rm -f "$STAMP"

V=k8s.io/component-base/version
LDFLAGS="-s -w -X $V.gitVersion=$VERSION -X $V.gitMajor=$MAJOR -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
LDFLAGS="$LDFLAGS -X k8s.io/client-go/pkg/version.gitVersion=$VERSION -X k8s.io/client-go/pkg/version.gitMajor=$MAJOR -X k8s.io/client-go/pkg/version.gitMinor=$MINOR"
for b in $BINS; do
	t=$(date +%s.%N)
	echo "k8s.sh: building $b $VERSION ($GOVER) into $OUT"
	(cd "$TOOLS/k8s" && go build -trimpath -ldflags "$LDFLAGS" -o "$tmp/$b" "$PKG/cmd/$b")
	echo "k8s.sh: $b built ($(elapsed "$t"))"
done

for b in $BINS; do mv -f "$tmp/$b" "$OUT/$b"; done
printf '%s\n' "$STAMP_WANT" >"$STAMP"

"$OUT/kubelet" --version
"$OUT/kubectl" version --client
echo "k8s.sh: done ($(elapsed "$start"))"
