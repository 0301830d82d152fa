#!/usr/bin/env bash
# Sets up, builds, and runs the main job on the embedded default model: perplexity of
# stories260K on the shared TinyStories excerpt, and a greedy continuation.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${LRKV_SHARED_DIR:-../shared}"
bash scripts/setup.sh
LRKV_TARGET=lrkv bash scripts/build.sh
./build/bin/lrkv eval --checkpoint "$SHARED/models/stories260K.gguf" \
  --text "$SHARED/data/tinystories-valid-excerpt.txt"
echo "greedy continuation (16 tokens):"
./build/bin/lrkv generate --checkpoint "$SHARED/models/stories260K.gguf" \
  --prompt "Once upon a time" --max-tokens 16
