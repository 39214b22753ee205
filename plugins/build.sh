#!/usr/bin/env bash
# Builds every default plugin as a WebAssembly component: plugins/dist/NAME.wasm.
#
#   plugins/build.sh            build (release, wasm32-wasip2) and copy to dist/
#   plugins/build.sh --check    also check each component against its WIT world with
#                               `wasm-tools component targets` (wasm-tools 1.263; found on PATH
#                               or given as WASM_TOOLS=/path/to/wasm-tools)
#
# The output is deterministic: the same toolchain (rust-toolchain.toml) and Cargo.lock give
# byte-identical files wherever the repository and CARGO_HOME live, because the paths that
# panic locations bake in are remapped (/eventpipe, /cargo). A RUSTFLAGS in the environment
# would override that remapping.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"

# plugin name (= directory, = dist file stem) : the WIT world it exports
plugins=(
  by-reason:aggregate-key-projected
  similar-events:message-combiner-projected
  source-object:spam-key-projected
  jsonl:sink
  log:watcher
)

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

packages=()
for entry in "${plugins[@]}"; do packages+=(-p "plugin-${entry%%:*}"); done
locked=()
if [[ -f "$here/Cargo.lock" ]]; then locked=(--locked); fi

cd "$here"
export CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS="--remap-path-prefix=$repo=/eventpipe --remap-path-prefix=$cargo_home=/cargo"
cargo build "${locked[@]}" --target wasm32-wasip2 --release "${packages[@]}"

mkdir -p dist
for entry in "${plugins[@]}"; do
  name="${entry%%:*}"
  cp "target/wasm32-wasip2/release/${name//-/_}.wasm" "dist/$name.wasm"
  printf '%-26s %7d bytes\n' "dist/$name.wasm" "$(wc -c < "dist/$name.wasm")"
done

if $check; then
  wasm_tools="${WASM_TOOLS:-$(command -v wasm-tools || true)}"
  if [[ -z "$wasm_tools" ]]; then
    echo "--check needs wasm-tools: cargo install --locked wasm-tools@1.263.0" >&2
    exit 1
  fi
  for entry in "${plugins[@]}"; do
    name="${entry%%:*}" world="${entry#*:}"
    "$wasm_tools" component targets "$repo/wit" "dist/$name.wasm" --world "$world"
    echo "dist/$name.wasm targets eventpipe:plugin/$world@0.1.0"
  done
fi
