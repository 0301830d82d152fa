#!/usr/bin/env bash
# The comparison study of the README's "Results", end to end through the service: a
# throwaway lrkvd, then one compare job per model (GQA, MQA, MLA with exact and with
# decoupled RoPE, and LRKV with plane, shared-plane, reconstruct and partial RoPE at
# cache budgets 0.25 / 0.5 / 0.75; each converted with the same
# calibration text (LRKV by the converged solver; one size for every layer unless
# ALLOCATION says layers), healed with the same
# 40 KD steps keeping the best step (judged on rows held out from the training text),
# evaluated on the same held-out documents, verified and timed), each printed as a table
# and written as JSON and as an HTML page with SVG plots under OUT_DIR (default
# build/compare-study).
#   scripts/compare_study.sh [OUT_DIR] [HEAL_STEPS] [ALLOCATION]
# ALLOCATION: uniform (default) or layers (LRKV and MLA sized per layer by the measured
# calibration loss, within each budget; shared-plane keeps one rank).
# Models: stories260K (../shared) and the d_h = 64 model of scripts/train_kjv.sh
# (build/models/kjv-d64; skipped with a note when it has not been trained); STUDY_MODELS
# (default "stories260K kjv-d64") picks some of them; VARIANTS, ROPE_MODES and BUDGETS
# (comma lists) narrow the rows, e.g. VARIANTS=mla ROPE_MODES=partial for decoupled MLA
# with and without the latent norm.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=$(realpath "${LRKV_SHARED_DIR:-../shared}")
out=$(realpath -m "${1:-build/compare-study}")
steps="${2:-40}"
allocation="${3:-uniform}"
mkdir -p "$out" build/models
source clients/lrkvd_local.sh
start_lrkvd "$SHARED/data" "$(realpath build/models)"
echo "lrkvd on $LRKV_SERVER"
export LRKV_NO_PROGRESS=1
common=(--budget "${BUDGETS:-0.25,0.5,0.75}" --variants "${VARIANTS:-gqa,mqa,mla,lrkv}"
        --rope-mode "${ROPE_MODES:-plane,reconstruct,shared-plane,partial}"
        --heal-steps "$steps" --heal-batch 8 --heal-seq-len 256 --heal-lr 0.003 --heal-warmup 5
        --context 128,512,2048 --timed-tokens 16 --kl-tokens 4096 --allocation "$allocation")

models="${STUDY_MODELS:-stories260K kjv-d64}"
stories_text="$SHARED/data/tinystories-valid-excerpt.txt"
if [[ " $models " == *" stories260K "* ]]; then
  ./build/bin/lrkv compare --checkpoint "$SHARED/models/stories260K.gguf" --label stories260K \
    --calib "$stories_text" --calib-range 0:0.5 --data "$stories_text" --data-range 0:0.8 \
    --eval "$stories_text" --eval-range 0.8:1 "${common[@]}" \
    --json-out "$out/stories260K.json" --html "$out/stories260K.html" | tee "$out/stories260K.txt"
fi

kjv=build/models/kjv-d64
if [[ " $models " != *" kjv-d64 "* ]]; then
  :
elif [ -f "$kjv/model.safetensors" ]; then
  # The model was trained on 256-token rows of chapters 0-95 %; whole chapters (~1,500
  # tokens) would measure length extrapolation, so the held-out chapters are cut into
  # passages of about 600 characters (whole sentences) for perplexity and KL.
  /usr/bin/python3 - "$kjv.txt" "$kjv.heldout.txt" <<'PY'
import re, sys
docs = [d.strip() for d in open(sys.argv[1]).read().split("\n<|endoftext|>\n") if d.strip()]
first = int(0.95 * len(docs) + 0.5)  # the split DocumentRange 0.95:1 makes
out = []
for doc in docs[first:]:
    passage = ""
    for sentence in re.split(r"(?<=[.?!:;]) ", doc):
        passage = (passage + " " + sentence).strip()
        if len(passage) >= 600:
            out.append(passage)
            passage = ""
    if passage:
        out.append(passage)
open(sys.argv[2], "w").write("\n<|endoftext|>\n".join(out) + "\n")
print("held-out passages: %d from chapters %d-%d" % (len(out), first, len(docs) - 1))
PY
  ./build/bin/lrkv compare --checkpoint "$kjv" --label kjv-d64 \
    --calib "$kjv.txt" --calib-range 0:0.95 --data "$kjv.txt" --data-range 0:0.95 \
    --eval "$kjv.heldout.txt" "${common[@]}" \
    --json-out "$out/kjv-d64.json" --html "$out/kjv-d64.html" | tee "$out/kjv-d64.txt"
else
  echo "note: $kjv not found; train it with scripts/train_kjv.sh to add the second model"
fi
echo "study written to $out"
