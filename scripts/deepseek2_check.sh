#!/usr/bin/env bash
# MLA in llama.cpp at real shapes (not part of the default test run): for each shape a
# random-weight checkpoint with the real model's config.json (scripts/scale_configs/,
# bf16; attention biases dropped where the shape has them, since deepseek2 has no place
# for them: the Qwen2.5 shape is written as a llama-architecture model), converted to
# MLA at budget 0.5 as llama.cpp's deepseek2 GGUF, and the source exported as GGUF.
# Then, in llama.cpp (node-llama-cpp) against lrkv's runtime on the same file:
# perplexity and greedy tokens, llama.cpp's KV cache for 4096 positions (MLA vs source),
# and `bench generate` at context 4096 with llama.cpp timing the export and the source
# in the same run.
#
#   scripts/deepseek2_check.sh [--shapes qwen2.5-0.5b,llama-3.2-1b] [--work DIR]
#                              (CONTEXT=4096 TOKENS=8 DTYPE=auto BENCH=1 by default)
# DTYPE=f32 writes both GGUF files in float32 (the checkpoints are bf16): llama.cpp then
# computes in float32 too, so the comparison tests the file and the model, not
# llama.cpp's bf16 arithmetic (it rounds activations to bf16 in every product with a
# bf16 weight, and its absorbed MLA path has more such products than its GQA path).
# BENCH=0 leaves out the timing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LRKV=${LRKV:-$ROOT/build/bin/lrkv}
TEST=$ROOT/build/bin/llama_cpp_reference_test
SHAPES=qwen2.5-0.5b,llama-3.2-1b
WORK=${TMPDIR:-/tmp}/lrkv-deepseek2
CONTEXT=${CONTEXT:-4096}
TOKENS=${TOKENS:-8}
DTYPE=${DTYPE:-auto}
BENCH=${BENCH:-1}
while [[ $# -gt 0 ]]; do
  case $1 in
    --shapes) SHAPES=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) echo "usage: $0 [--shapes a,b] [--work DIR]" >&2; exit 2 ;;
  esac
done
[[ -x $LRKV && -x $TEST ]] || { echo "build first: $LRKV or $TEST missing" >&2; exit 2; }
TOK=$ROOT/tests/js/node_modules/@lenml
[[ -d $TOK ]] || { echo "run scripts/setup.sh first (npm references missing)" >&2; exit 2; }
mkdir -p "$WORK"
"$LRKV" sysinfo
IFS=, read -ra LIST <<<"$SHAPES"
for shape in "${LIST[@]}"; do
  cfg=scripts/scale_configs/$shape.json
  [[ -f $cfg ]] || { echo "no $cfg" >&2; exit 2; }
  case $shape in
    llama*) tok=$TOK/tokenizer-llama3/models ;;
    *) tok=$TOK/tokenizer-qwen3/models ;;
  esac
  echo "== $shape"
  src=$WORK/$shape mla=$WORK/$shape-mla gguf=$WORK/$shape-gguf
  rm -rf "$src" "$mla" "$gguf"
  # Biases dropped: the same shape as a llama-architecture config.
  python3 - "$cfg" "$WORK/$shape.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
if c.get("model_type") == "qwen2":
    c["model_type"] = "llama"
    c["architectures"] = ["LlamaForCausalLM"]
    c["attention_bias"] = False
    c.pop("use_sliding_window", None); c.pop("sliding_window", None); c.pop("max_window_layers", None)
    print("  qwen2 shape written as llama: attention biases dropped")
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  "$LRKV" init --config "$WORK/$shape.json" --tokenizer-from "$tok" --out "$src" >/dev/null
  kv=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_key_value_heads"])' "$WORK/$shape.json")
  "$LRKV" convert --checkpoint "$src" --variant gqa --kv-heads "$kv" --format gguf \
    --weight-dtype "$DTYPE" --out "$gguf" >/dev/null
  # Llama-3's llama3 rope scaling leaves only the high-frequency planes one geometric
  # progression, which is what deepseek2's rotary computes: the refusal names how many
  # planes to keep, and the conversion is run again keeping those.
  planes=()
  if ! "$LRKV" convert --checkpoint "$src" --variant mla --budget 0.5 --format gguf \
      --weight-dtype "$DTYPE" --out "$mla" >"$WORK/convert.log" 2>&1; then
    n=$(grep -o -- '--rope-planes [0-9]*' "$WORK/convert.log" | grep -o '[0-9]*$' || true)
    [[ -n $n ]] || { cat "$WORK/convert.log" >&2; exit 1; }
    echo "  $(grep -o 'RoPE plane [0-9]* turns[^;]*' "$WORK/convert.log"): keeping $n planes"
    planes=(--rope-planes "$n")
    rm -rf "$mla"
    "$LRKV" convert --checkpoint "$src" --variant mla --budget 0.5 --format gguf \
      --weight-dtype "$DTYPE" "${planes[@]}" --out "$mla" >"$WORK/convert.log" 2>&1
  fi
  grep -E "^(conversion|cache|time)" "$WORK/convert.log" | sed 's/^/  /'
  LRKV_DEEPSEEK2_MLA=$mla/model.gguf LRKV_DEEPSEEK2_SOURCE=$gguf/model.gguf LRKV_DEEPSEEK2_BUDGET=0.5 \
    "$TEST" --gtest_also_run_disabled_tests --gtest_filter='*RealShapeExportRunsInLlamaCpp' |
    grep -E "source GGUF|deepseek2 export|KV cache|llama_kv_cache|OK|FAILED|Failure|Expected|actual" || true
  if [[ $BENCH == 1 ]]; then
    "$LRKV" bench generate --checkpoint "$mla/model.gguf" --context "$CONTEXT" --tokens "$TOKENS" \
      --against-llama-cpp "$mla/model.gguf" --llama-cpp-source "$gguf/model.gguf" | sed -n '/^model/,$p'
  fi
  rm -rf "$src" "$mla" "$gguf"
done
