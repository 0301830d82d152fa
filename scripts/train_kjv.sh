#!/usr/bin/env bash
# Trains the second test model from scratch with lrkv's own trainer: an MHA Llama with
# head dimension 64 (6 layers, d = 256, 4 heads, SwiGLU 768, context 512, 5.4M
# parameters) on the King James Bible (Debian's bible-kjv-text, public domain; see
# scripts/kjv_corpus.sh), tokenized with the stories260K tokenizer. Chapters 0-95 % train,
# the last 5 % are held out. About 30 minutes on 2 CPU cores.
#   scripts/train_kjv.sh [OUT_DIR] [STEPS]
# Writes OUT_DIR (default build/models/kjv-d64: a safetensors checkpoint with its
# tokenizer and heal_report.json) and OUT_DIR.txt, the corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${LRKV_SHARED_DIR:-../shared}"
out="${1:-build/models/kjv-d64}"
steps="${2:-1200}"
[ -x build/bin/lrkv ] || LRKV_TARGET=lrkv bash scripts/build.sh
bash scripts/kjv_corpus.sh "$out.txt"
rm -rf "$out.init"
./build/bin/lrkv init --tokenizer-from "$SHARED/models/stories260K.gguf" --layers 6 --hidden 256 \
  --heads 4 --ffn 768 --context 512 --seed 1 --out "$out.init"
./build/bin/lrkv heal --checkpoint "$out.init" --loss lm --trainable all \
  --data "$out.txt" --data-range 0:0.95 --eval "$out.txt" --eval-range 0.95:1 \
  --steps "$steps" --batch 16 --seq-len 256 --lr 2e-3 --warmup 50 --clip 1.0 \
  --eval-every 200 --seed 1 --out "$out"
rm -rf "$out.init"
