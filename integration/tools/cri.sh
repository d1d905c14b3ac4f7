#!/usr/bin/env bash
# Build the CRI binaries of the end-to-end tests: containerd with its CRI
# plugin (containerd-cri) and crictl.
#
#   integration/tools/cri.sh [outdir]     (default: $REPO/.cache/bin)
#
# containerd-cri is the containerd of integration/tools/go.mod (the same
# version as build.sh's containerd) built without no_cri: a binary of its
# own, so that the other tests keep the smaller, faster-built one. crictl is
# the cri-tools of integration/tools/crictl/go.mod, a module of its own so
# that its Kubernetes dependencies do not move containerd's. Skipped when
# both binaries exist and the stamp matches the inputs; safe to run
# concurrently (flock); binaries replaced atomically. Cold, on 2 cores,
# this takes several minutes (docs/e2e.md); CI caches .cache/bin.
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

# As build.sh, CRI included.
TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
PKG=github.com/containerd/containerd/v2
CRICTL=sigs.k8s.io/cri-tools

export GOWORK=off GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly" CGO_ENABLED=0

modversion() { awk '$1 == "require" && $2 == "'"$2"'" {print $3} $1 == "'"$2"'" {print $2}' "$1/go.mod" | head -n1; }
VERSION=$(modversion "$TOOLS" "$PKG")
CRIVERSION=$(modversion "$TOOLS/crictl" "$CRICTL")
[ -n "$VERSION" ] && [ -n "$CRIVERSION" ] || { echo "cri.sh: cannot find $PKG or $CRICTL in $TOOLS" >&2; exit 1; }
GOVER=$(go env GOVERSION)
SUM=$(cd "$TOOLS" && sha256sum go.mod go.sum crictl/go.mod crictl/go.sum cri.sh | sha256sum | cut -d' ' -f1)
STAMP_WANT="containerd=$VERSION crictl=$CRIVERSION go=$GOVER tags=$TAGS inputs=$SUM"
STAMP="$OUT/.cri-tools.stamp"

exec 9>"$OUT/.cri-tools.lock"
flock 9

elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1fs", e-s}'; }

if [ "${FORCE:-0}" != 1 ] && [ -x "$OUT/containerd-cri" ] && [ -x "$OUT/crictl" ] &&
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ]; then
	echo "cri.sh: containerd-cri $VERSION and crictl $CRIVERSION up to date in $OUT ($(elapsed "$start"))"
	exit 0
fi

tmp=$(mktemp -d "$OUT/.build-cri.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rm -f "$STAMP"

t=$(date +%s.%N)
echo "cri.sh: building containerd-cri $VERSION ($GOVER, tags: $TAGS) into $OUT"
(cd "$TOOLS" && go build -trimpath -tags "$TAGS" \
	-ldflags "-s -w -X $PKG/version.Version=$VERSION -X $PKG/version.Package=github.com/containerd/containerd" \
	-o "$tmp/containerd-cri" "$PKG/cmd/containerd")
echo "cri.sh: containerd-cri built ($(elapsed "$t"))"

t=$(date +%s.%N)
echo "cri.sh: building crictl $CRIVERSION into $OUT"
(cd "$TOOLS/crictl" && go build -trimpath \
	-ldflags "-s -w -X $CRICTL/pkg/version.Version=$CRIVERSION" \
	-o "$tmp/crictl" "$CRICTL/cmd/crictl")
echo "cri.sh: crictl built ($(elapsed "$t"))"

mv -f "$tmp/containerd-cri" "$OUT/containerd-cri"
mv -f "$tmp/crictl" "$OUT/crictl"
printf '%s\n' "$STAMP_WANT" >"$STAMP"

"$OUT/containerd-cri" --version
"$OUT/crictl" --version
echo "cri.sh: done ($(elapsed "$start"))"
