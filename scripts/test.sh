#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build under ctest, then
# the checkpoint parsers, kernels, the malformed-file corpus and the request parsers
# under ASan + UBSan, then a bounded libFuzzer run of every fuzz target from that same
# build (LRKV_FUZZ_SECONDS each, default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== parsers, kernels and malformed corpus under ASan + UBSan (clang; the same build holds the fuzz targets)"
# One sanitizer build serves both: its objects carry libFuzzer's coverage hooks
# (fuzzer-no-link), which the tests link against the sanitizer runtime's defaults.
CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DLRKV_BUILD_SCOPE=formats -DLRKV_SANITIZE=ON -DLRKV_FUZZ=ON >/dev/null
cmake --build build-san -j"$(nproc)"
ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-san --output-on-failure -j"$(nproc)"
echo "== libFuzzer (clang, ASan + UBSan): parsers, params_json, upload header, HTTP, 15 s each"
LRKV_FUZZ_DIR=build-san bash scripts/fuzz.sh "${LRKV_FUZZ_SECONDS:-15}" 2>&1 |
  grep -E '^(==|Done|stat::number)|ERROR|SUMMARY'
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
