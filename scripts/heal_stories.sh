#!/usr/bin/env bash
# The healing measurement of the README: stories260K converted to LRKV r=2 (activation
# metric, calibrated on the first 80% of the excerpt's stories), healed by distillation
# on the same 80%, perplexity on the last 20% before and after, beside the source.
#   scripts/heal_stories.sh [STEPS]   (default 40)
# Needs a built build/bin/lrkv.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${LRKV_SHARED_DIR:-../shared}"
MODEL="$SHARED/models/stories260K.gguf"
TEXT="$SHARED/data/tinystories-valid-excerpt.txt"
steps="${1:-40}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
./build/bin/lrkv convert --checkpoint "$MODEL" --variant lrkv --rank 2 --rope-mode reconstruct --metric activation \
  --calib "$TEXT" --calib-range 0:0.8 --calib-tokens 1000000 --out "$work/converted" >/dev/null
./build/bin/lrkv heal --checkpoint "$work/converted" --teacher "$MODEL" --data "$TEXT" \
  --data-range 0:0.8 --eval "$TEXT" --eval-range 0.8:1 --steps "$steps" --batch 8 \
  --seq-len 256 --lr 3e-3 --warmup $(( steps < 10 ? 1 : 10 )) --eval-every 50 \
  --events "$work/events.jsonl" --out "$work/healed"
