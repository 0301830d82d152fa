#!/usr/bin/env bash
# Sets up, builds, and runs the main jobs on the shared default model: perplexity of
# stories260K on the TinyStories excerpt and a greedy continuation, then the whole
# pipeline through the service (scripts/service_demo.sh: a throwaway lrkvd, upload,
# convert to LRKV at budget 0.5 -> heal -> verify -> bench, watch, report, stop).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${LRKV_SHARED_DIR:-../shared}"
bash scripts/setup.sh
# lrkv_python: the Python client's generated modules (build/python), for docs/service.md's example
LRKV_TARGET="lrkv lrkvd lrkv_python" bash scripts/build.sh
./build/bin/lrkv eval --checkpoint "$SHARED/models/stories260K.gguf" \
  --text "$SHARED/data/tinystories-valid-excerpt.txt"
echo "greedy continuation (16 tokens):"
./build/bin/lrkv generate --checkpoint "$SHARED/models/stories260K.gguf" \
  --prompt "Once upon a time" --max-tokens 16
echo
bash scripts/service_demo.sh
