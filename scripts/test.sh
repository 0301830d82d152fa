#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the Release build under ctest, then
# the checkpoint parsers, the malformed-file corpus and the request parsers under
# ASan + UBSan, then a bounded libFuzzer run of every fuzz target (LRKV_FUZZ_SECONDS
# each, default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== parsers and malformed corpus under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLRKV_BUILD_SCOPE=formats \
  -DLRKV_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)"
echo "== libFuzzer (clang, ASan + UBSan): parsers, params_json, upload header, 15 s each"
bash scripts/fuzz.sh "${LRKV_FUZZ_SECONDS:-15}" 2>&1 | grep -E '^(==|Done|stat::number)|ERROR|SUMMARY'
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
