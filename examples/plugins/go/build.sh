#!/bin/sh
# Builds the Go example plugins: quiet-normal.wasm (filter) and namespace-reason.wasm
# (aggregate-key), in this directory.
#
# Needs Go >= 1.24 (`go`, or set GO) and eventpipe-plugin-build (`cargo install --path
# tools/plugin-build` from the repository root; or set PLUGIN_BUILD to another command, e.g.
# "cargo run -q -p eventpipe-plugin-build --"). Nothing is downloaded: the SDK is
# ../../../guest-sdk/go, which depends on Go's standard library only.
set -eu
cd "$(dirname "$0")"
WIT=${WIT:-../../../wit}
PLUGIN_BUILD=${PLUGIN_BUILD:-eventpipe-plugin-build}
GO=${GO:-go}
mkdir -p build
# name world package
while read -r name world dir; do
  GOOS=wasip1 GOARCH=wasm GOPROXY=off GOFLAGS=-mod=mod \
    $GO build -buildmode=c-shared -trimpath -ldflags=-s -o "build/$name.core.wasm" "./$dir"
  $PLUGIN_BUILD component "build/$name.core.wasm" --wit "$WIT" --world "$world" --stub-wasi -o "$name.wasm"
  echo "built $name.wasm"
done <<LIST
quiet-normal filter-enriched filter
namespace-reason aggregate-key aggregate-key
LIST
