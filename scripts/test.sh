#!/usr/bin/env bash
# Sets up, builds and runs the whole Release test suite under ctest (what CI runs;
# the longest tests start first). The sanitizer and fuzzing runs are
# scripts/sanitize.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/build.sh
# One OpenMP thread a test, as many tests as cores: tests of two threads each, two
# at a time on two cores, stalled at each other's OpenMP barriers (the suite took
# 904 s that way, 658 s this way). Tests of thread counts set their own.
OMP_NUM_THREADS=1 ctest --test-dir build --output-on-failure -j"$(nproc)"
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
