#!/usr/bin/env bash
# Build the pinned containerd + ctr binaries used by the end-to-end tests.
#
#   integration/tools/build.sh [outdir]     (default: $REPO/.cache/bin)
#
# The version is whatever integration/tools/go.mod pins (containerd v2.2.9).
# The build is skipped when both binaries exist and the stamp file matches the
# pinned version, go.sum, Go toolchain and build tags. Safe to run concurrently
# (flock on the output dir); binaries are replaced atomically.
#
# Environment:
#   CONTAINERD_BUILDTAGS  override the build tags (default: see TAGS below)
#   FORCE=1               rebuild even if the stamp matches
set -euo pipefail

start=$(date +%s.%N)
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$TOOLS/../.." && pwd -P)
OUT=${1:-$REPO/.cache/bin}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)

# Pure-Go build: btrfs is the only cgo-only snapshotter (tag `!no_btrfs && cgo`);
# devmapper/zfs are excluded too since the tests never use them. CRI is left out:
# the e2e tests only exercise content/images/snapshots/leases/GC, and no_cri
# drops the whole k8s dependency tree (much faster cold build, smaller binary).
TAGS=${CONTAINERD_BUILDTAGS:-urfave_cli_no_docs no_btrfs no_devmapper no_zfs no_cri}
PKG=github.com/containerd/containerd/v2

export GOWORK=off GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly" CGO_ENABLED=0

cd "$TOOLS"
VERSION=$(awk '$1 == "require" && $2 == "'"$PKG"'" {print $3} $1 == "'"$PKG"'" {print $2}' go.mod | head -n1)
[ -n "$VERSION" ] || { echo "build.sh: cannot find $PKG in $TOOLS/go.mod" >&2; exit 1; }
GOVER=$(go env GOVERSION)
SUM=$(sha256sum go.mod go.sum "$TOOLS/build.sh" | sha256sum | cut -d' ' -f1)
STAMP_WANT="containerd=$VERSION go=$GOVER tags=$TAGS inputs=$SUM"
STAMP="$OUT/.containerd-tools.stamp"

# Serialise concurrent builders (e.g. parallel `go test` packages).
exec 9>"$OUT/.containerd-tools.lock"
flock 9

elapsed() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1fs", e-s}'; }

if [ "${FORCE:-0}" != 1 ] && [ -x "$OUT/containerd" ] && [ -x "$OUT/ctr" ] &&
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ]; then
	echo "build.sh: containerd $VERSION up to date in $OUT ($(elapsed))"
	exit 0
fi

echo "build.sh: building containerd $VERSION ($GOVER, tags: $TAGS) into $OUT"
tmp=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rm -f "$STAMP"

go build -trimpath -tags "$TAGS" \
	-ldflags "-s -w -X $PKG/version.Version=$VERSION -X $PKG/version.Package=github.com/containerd/containerd" \
	-o "$tmp/" "$PKG/cmd/containerd" "$PKG/cmd/ctr"

mv -f "$tmp/containerd" "$OUT/containerd"
mv -f "$tmp/ctr" "$OUT/ctr"
printf '%s\n' "$STAMP_WANT" >"$STAMP"

"$OUT/containerd" --version
ls -l "$OUT/containerd" "$OUT/ctr" | awk '{printf "  %s %.1f MiB\n", $NF, $5/1048576}'
echo "build.sh: done ($(elapsed))"
