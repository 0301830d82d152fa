#!/usr/bin/env bash
# The checkpoint parsers, kernels, malformed-file corpus and request parsers under
# ASan + UBSan (clang), then a bounded libFuzzer run of every fuzz target from that
# same build (its objects carry libFuzzer's coverage hooks, which the tests link
# against the sanitizer runtime's defaults). Separate from scripts/test.sh, whose
# Release suite alone fills the CI's 30 minutes on 2 cores; run it on changes to
# parsers, kernels or the servers' request handling.
#   scripts/sanitize.sh [FUZZ_SECONDS]   (default 15 a target)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DLRKV_BUILD_SCOPE=formats -DLRKV_SANITIZE=ON -DLRKV_FUZZ=ON >/dev/null
cmake --build build-san -j"$(nproc)"
echo "== parsers, kernels and malformed corpus under ASan + UBSan"
ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-san --output-on-failure -j"$(nproc)"
seconds="${1:-15}"
echo "== libFuzzer (clang, ASan + UBSan): parsers, params_json, upload header, HTTP, $seconds s each"
LRKV_FUZZ_DIR=build-san bash scripts/fuzz.sh "$seconds" 2>&1 |
  grep -E '^(==|Done|stat::number)|ERROR|SUMMARY'
echo "sanitize.sh: passed in $(( $(date +%s) - start )) s"
