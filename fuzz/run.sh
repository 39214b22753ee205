#!/usr/bin/env bash
# Fuzzes one target with AFL++ through afl.rs, on the stable toolchain: builds it instrumented,
# then runs afl-fuzz (one core) from the seeds, with the dictionary, keeping its state in
# out/TARGET/ (a second run resumes it). See "Fuzzing" in docs/development.md.
#
# Usage: fuzz/run.sh decode|ingest_body [SECONDS]   (without SECONDS: until Ctrl-C)
# Needs: cargo install cargo-afl --locked (once; it builds AFL++ too).
set -euo pipefail
cd "$(dirname "$0")"

target=${1:-}
case $target in
    decode | ingest_body) ;;
    *)
        echo "usage: $0 decode|ingest_body [SECONDS]" >&2
        exit 2
        ;;
esac
seconds=${2:-}

cargo afl build --release --locked --bin "$target"
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

mkdir -p out
export AFL_AUTORESUME=${AFL_AUTORESUME:-1}
export AFL_SKIP_CPUFREQ=${AFL_SKIP_CPUFREQ:-1}
exec cargo afl fuzz -i seeds -x event.dict -o "out/$target" ${seconds:+-V "$seconds"} "$target_dir/release/$target"
