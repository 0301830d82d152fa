#!/usr/bin/env bash
# Behaviour unchanged, measured: runs the same conversions (12 targets: every variant and
# RoPE mode, both metrics, per-layer sizes by loss and by error, each with perplexity on
# held-out text), `lrkv verify` on each (all modes, fp32 and bf16, cache bytes, head
# diversity, fidelity) and a small healed study (6 rows) with two builds, and diffs what
# they print, timings aside. For refactors: build the old commit into one folder and
# the new one into another.
#   scripts/same_figures.sh OLD_BIN_DIR NEW_BIN_DIR [OUT_DIR]
# Each BIN_DIR holds an `lrkv`. About 8 minutes per build on 2 cores. Exit 1 on a
# difference.
set -euo pipefail
old=$(realpath "$1"); new=$(realpath "$2")
out=$(realpath -m "${3:-$(mktemp -d)}")
SHARED=$(realpath "${LRKV_SHARED_DIR:-$(dirname "$0")/../../shared}")
M="$SHARED/models/stories260K.gguf"
T="$SHARED/data/tinystories-valid-excerpt.txt"
export LRKV_NO_PROGRESS=1
cal="--calib $T --calib-range 0:0.5"
configs=(
  "lrkv --rank 2 --rope-mode plane"
  "lrkv --rank 2 --rope-mode plane --metric activation $cal"
  "lrkv --rank 2 $cal --metric activation --allocation layers"
  "lrkv --rank 4 --rope-mode plane --allocation layers --allocation-objective error"
  "lrkv --rank 2 --rope-mode partial --metric activation $cal"
  "lrkv --rank 4 --rope-mode shared-plane --metric activation $cal"
  "mla --latent 24 --metric activation $cal"
  "mla --latent 32 --allocation layers $cal"
  "mla --latent 20 --rope-mode partial --rope-planes 2 --metric activation $cal"
  "mla --latent 28 --rope-mode partial --rope-planes 2 --allocation layers"
  "gqa --kv-heads 2 --metric activation $cal"
  "mqa"
)
run() {  # BIN DIR
  local bin=$1 dir=$2 i=0
  mkdir -p "$dir"
  for cfg in "${configs[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$bin/lrkv" convert --checkpoint "$M" --variant $cfg --eval "$T" --eval-range 0.5:1 \
      --out "$dir/model_$i" >"$dir/convert_$i.txt" 2>&1
    # A FAIL verdict exits 1: its exit code is a figure like the others.
    "$bin/lrkv" verify --checkpoint "$dir/model_$i" --source "$M" --rope-mode all \
      --dtype both --text "$T" >"$dir/verify_$i.txt" 2>&1 || echo "exit $?" >>"$dir/verify_$i.txt"
    rm -rf "$dir/model_$i"
  done
  "$bin/lrkv" compare --checkpoint "$M" --budget 0.5 --variants gqa,mla,lrkv \
    --rope-mode plane,reconstruct,partial $cal --heal-steps 6 --data "$T" --data-range 0:0.5 \
    --heal-warmup 2 --eval "$T" --eval-range 0.5:1 --kl-tokens 1024 --context 64 \
    --timed-tokens 4 --work-dir "$dir/study" --json-out "$dir/study.json" >/dev/null 2>&1
  rm -rf "$dir/study"
}
run "$old" "$out/old"
run "$new" "$out/new"
# Paths, progress and wall times differ from run to run; every figure must not.
skip='^convert \[\|^verify \[\|^checkpoint \|^time \|written to\|/model_'
status=0
for f in "$out"/old/*.txt; do
  name=$(basename "$f")
  if ! diff <(grep -v "$skip" "$f") <(grep -v "$skip" "$out/new/$name") >"$out/$name.diff"; then
    echo "DIFFERENT: $name (see $out/$name.diff)"
    status=1
  fi
done
python3 - "$out/old/study.json" "$out/new/study.json" <<'PY' || status=1
import json, sys
timing = {"step_ms", "step_ratio_to_mha"}
rows = [[{k: v for k, v in r.items() if k not in timing} for r in json.load(open(p))["rows"]]
        for p in sys.argv[1:]]
if rows[0] != rows[1]:
    print("DIFFERENT: the study's rows")
    sys.exit(1)
PY
[ "$status" -eq 0 ] && echo "same figures: ${#configs[@]} conversions, their verify tables and the study's rows ($out)"
exit "$status"
