#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes each for SECONDS (default 60): the
# checkpoint parsers, seeded with the malformed corpus (and the shared model for GGUF),
# and what the servers parse of a client's bytes first — params_json, an upload's
# header, lrkv serve's HTTP requests — seeded from fuzz/seeds/. A crash, a sanitizer
# report or a stack overflow fails the run (exit non-zero) and leaves the input as
# DIR/crash-*. DIR is LRKV_FUZZ_DIR (default build-fuzz); a folder already configured
# (scripts/test.sh's sanitizer build, with LRKV_FUZZ=ON) is reused as it is.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
dir="${LRKV_FUZZ_DIR:-build-fuzz}"
targets="safetensors gguf params_json upload_header http_request"
if [ ! -f "$dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DLRKV_BUILD_SCOPE=formats \
    -DLRKV_FUZZ=ON -DLRKV_BUILD_TESTS=OFF >/dev/null
fi
# shellcheck disable=SC2086  # a list of names
cmake --build "$dir" --target $(printf 'fuzz_%s ' $targets)
for kind in $targets; do
  corpus="$dir/corpus-$kind"
  mkdir -p "$corpus"
  case "$kind" in
    safetensors|gguf) cp tests/fixtures/malformed/*."$kind" "$corpus"/ ;;
    *) cp fuzz/seeds/"$kind"/* "$corpus"/ ;;
  esac
  [ "$kind" = gguf ] && [ -f ../shared/models/stories260K.gguf ] && \
    cp ../shared/models/stories260K.gguf "$corpus"/
  echo "== fuzz_$kind for $seconds s"
  ./"$dir"/bin/fuzz_"$kind" -max_total_time="$seconds" -max_len=65536 \
    -artifact_prefix="$dir"/ -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
  [ "${PIPESTATUS[0]}" -eq 0 ]
done
