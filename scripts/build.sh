#!/usr/bin/env bash
# Configures and builds lrkv into build/ (Release). Extra arguments go to cmake, e.g.
#   scripts/build.sh -DTorch_DIR=/path/to/libtorch/share/cmake/Torch
# Set LRKV_TARGET to build only these targets (space-separated; default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# shellcheck disable=SC2086  # LRKV_TARGET is a list
cmake --build build -j"$(nproc)" ${LRKV_TARGET:+--target $LRKV_TARGET}
