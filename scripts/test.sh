#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build under ctest, then
# the checkpoint parsers, kernels, the malformed-file corpus and the request parsers
# under ASan + UBSan, then a bounded libFuzzer run of every fuzz target from that same
# build (LRKV_FUZZ_SECONDS each, default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/build.sh

# The sanitizer build (clang, ASan + UBSan; its objects also carry libFuzzer's
# coverage hooks, which the tests link against the sanitizer runtime's defaults, so
# the fuzz targets come from it too) compiles beside the Release tests at the lowest
# CPU priority: it takes the cores the tests leave idle (servers waiting on sockets,
# node starting up) and yields them when a test computes.
CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DLRKV_BUILD_SCOPE=formats -DLRKV_SANITIZE=ON -DLRKV_FUZZ=ON >/dev/null
nice -n 19 cmake --build build-san -j"$(nproc)" >build-san/build.log 2>&1 &
san_build=$!
trap 'kill "$san_build" 2>/dev/null || true' EXIT
ctest --test-dir build --output-on-failure -j"$(nproc)"
echo "== the sanitizer build (begun beside the tests, $(( $(date +%s) - start )) s in)"
if ! wait "$san_build"; then
  tail -n 40 build-san/build.log
  exit 1
fi
trap - EXIT

echo "== parsers, kernels and malformed corpus under ASan + UBSan"
ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-san --output-on-failure -j"$(nproc)"
seconds="${LRKV_FUZZ_SECONDS:-10}"
echo "== libFuzzer (clang, ASan + UBSan): parsers, params_json, upload header, HTTP, $seconds s each"
LRKV_FUZZ_DIR=build-san bash scripts/fuzz.sh "$seconds" 2>&1 |
  grep -E '^(==|Done|stat::number)|ERROR|SUMMARY'
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
