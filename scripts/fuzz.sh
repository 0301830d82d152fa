#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and fuzzes each parser for SECONDS (default
# 60), seeded with the malformed corpus (and the shared model for GGUF).
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DLRKV_BUILD_SCOPE=formats \
  -DLRKV_FUZZ=ON -DLRKV_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz
for kind in safetensors gguf; do
  corpus="build-fuzz/corpus-$kind"
  mkdir -p "$corpus"
  cp tests/fixtures/malformed/*."$kind" "$corpus"/
  [ "$kind" = gguf ] && [ -f ../shared/models/stories260K.gguf ] && \
    cp ../shared/models/stories260K.gguf "$corpus"/
  ./build-fuzz/bin/fuzz_"$kind" -max_total_time="$seconds" -max_len=65536 "$corpus"
done
