#!/bin/sh
# Builds the C example plugins: quiet-normal.wasm (filter) and namespace-reason.wasm
# (aggregate-key), in this directory.
#
# Needs Debian's clang, lld, wasi-libc and libclang-rt-dev-wasm32, and eventpipe-plugin-build
# (`cargo install --path tools/plugin-build` from the repository root; or set PLUGIN_BUILD to
# another command, e.g. "cargo run -q -p eventpipe-plugin-build --").
set -eu
cd "$(dirname "$0")"
WIT=${WIT:-../../../wit}
PLUGIN_BUILD=${PLUGIN_BUILD:-eventpipe-plugin-build}
CC=${CC:-clang}
CFLAGS="--target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra"
mkdir -p build
# name world source
while read -r name world source; do
  gen=build/$world
  $PLUGIN_BUILD c-bindings --wit "$WIT" --world "$world" --out-dir "$gen" >/dev/null
  stem=$(echo "$world" | tr - _)
  $CC $CFLAGS -I. -I"$gen" -o "build/$name.core.wasm" "$source" "$gen/$stem.c" "$gen/${stem}_component_type.o" \
    -Wl,--strip-debug
  $PLUGIN_BUILD component "build/$name.core.wasm" -o "$name.wasm"
  echo "built $name.wasm"
done <<LIST
quiet-normal filter filter/quiet_normal.c
namespace-reason aggregate-key aggregate-key/namespace_reason.c
LIST
