#!/usr/bin/env bash
# Build the containerd binaries of the compiled-in benchmark (make
# bench-containerd): containerd's own cmd/containerd, and the same with
# sharedcontent's plugin/builtin compiled in (./main.go), both at the
# containerd version this module resolves (the main module's).
#
#   integration/tools/builtin/build.sh [outdir]   (default: $REPO/.cache/bin/builtin)
#
# Skipped when both exist and the stamp matches the inputs (this module,
# the main module's sources, the Go toolchain). FORCE=1 rebuilds.
set -euo pipefail

start=$(date +%s.%N)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../../.." && pwd -P)
OUT=${1:-$REPO/.cache/bin/builtin}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)

TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs no_cri"
PKG=github.com/containerd/containerd/v2
export GOWORK=off GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly" CGO_ENABLED=0

cd "$HERE"
VERSION=$(go list -m -f '{{.Version}}' "$PKG")
SUM=$( { cat go.mod go.sum build.sh main.go; cd "$REPO" && git ls-files -z -- go.mod go.sum '*.go' | grep -zv '^integration/\|^bench/\|^deploy/' | xargs -0 cat; } | sha256sum | cut -d' ' -f1)
STAMP_WANT="containerd=$VERSION go=$(go env GOVERSION) tags=$TAGS inputs=$SUM"
STAMP="$OUT/.builtin.stamp"

exec 9>"$OUT/.builtin.lock"
flock 9

elapsed() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1fs", e-s}'; }

if [ "${FORCE:-0}" != 1 ] && [ -x "$OUT/containerd" ] && [ -x "$OUT/containerd-sharedcontent" ] &&
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ]; then
	echo "build.sh: containerd $VERSION, stock and with sharedcontent compiled in, up to date in $OUT ($(elapsed))"
	exit 0
fi

echo "build.sh: building containerd $VERSION, stock and with sharedcontent compiled in, into $OUT"
tmp=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rm -f "$STAMP"
flags=(-trimpath -tags "$TAGS" -ldflags "-s -w -X $PKG/version.Version=$VERSION -X $PKG/version.Package=github.com/containerd/containerd")
go build "${flags[@]}" -o "$tmp/containerd" "$PKG/cmd/containerd"
go build "${flags[@]}" -o "$tmp/containerd-sharedcontent" .
mv -f "$tmp/containerd" "$tmp/containerd-sharedcontent" "$OUT/"
printf '%s\n' "$STAMP_WANT" >"$STAMP"
echo "build.sh: done ($(elapsed))"
