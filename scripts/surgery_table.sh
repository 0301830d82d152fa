#!/usr/bin/env bash
# The surgery table for stories260K: perplexity on the second half of the shared
# excerpt's stories for LRKV r in {1,2,4,6} (reconstruct, plane and shared-plane RoPE),
# GQA n_kv=2, MQA and MLA at the matching cache (exact, and with decoupled RoPE), in both
# metrics, calibrated on the first half, and for LRKV and MLA below the full cache also
# with --allocation layers in both metrics (per-layer sizes within the same total cache,
# by the loss on 4,096 calibration tokens; decoupled-RoPE MLA by the decomposition's
# error; not for shared-plane, which has one rank). Needs a built build/bin/lrkv.
# Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${LRKV_SHARED_DIR:-../shared}"
MODEL="$SHARED/models/stories260K.gguf"
TEXT="$SHARED/data/tinystories-valid-excerpt.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name | convert arguments (the same for both metrics)
configs=(
  "lrkv r=1|--variant lrkv --rank 1 --rope-mode reconstruct"
  "mla d_c=24|--variant mla --latent 24"
  "mla d_c=20 d_rope=4 partial|--variant mla --latent 20 --rope-mode partial --rope-planes 2"
  "lrkv r=2|--variant lrkv --rank 2 --rope-mode reconstruct"
  "lrkv r=2 plane|--variant lrkv --rank 2 --rope-mode plane"
  "lrkv r=2 shared-plane|--variant lrkv --rank 2 --rope-mode shared-plane"
  "gqa n_kv=2|--variant gqa --kv-heads 2"
  "mla d_c=32|--variant mla --latent 32"
  "mla d_c=28 d_rope=4 partial|--variant mla --latent 28 --rope-mode partial --rope-planes 2"
  "mla d_c=24 d_rope=8 partial|--variant mla --latent 24 --rope-mode partial --rope-planes 4"
  "lrkv r=4|--variant lrkv --rank 4 --rope-mode reconstruct"
  "lrkv r=4 plane|--variant lrkv --rank 4 --rope-mode plane"
  "lrkv r=4 shared-plane|--variant lrkv --rank 4 --rope-mode shared-plane"
  "mla d_c=48|--variant mla --latent 48"
  "mla d_c=44 d_rope=4 partial|--variant mla --latent 44 --rope-mode partial --rope-planes 2"
  "lrkv r=6|--variant lrkv --rank 6 --rope-mode reconstruct"
  "lrkv r=6 plane|--variant lrkv --rank 6 --rope-mode plane"
  "lrkv r=6 shared-plane|--variant lrkv --rank 6 --rope-mode shared-plane"
  "mla d_c=64|--variant mla --latent 64"
  "mqa|--variant mqa"
)
i=0
for entry in "${configs[@]}"; do
  args="${entry#*|}"
  for metric in weight activation layers-weight layers; do
    alloc=uniform m=$metric
    case "$metric" in
      layers*)
        # shared-plane uses one rank for every layer; at the full cache every layer is
        # the source already.
        case "$args" in
          *shared-plane*|*"rank 6"*|*"latent 64"*) continue ;;
          *lrkv*|*mla*) alloc=layers m=activation ;;
          *) continue ;;
        esac
        [ "$metric" = layers-weight ] && m=weight
        ;;
    esac
    i=$((i + 1))
    # Calibration text where something reads it (the activation metric, per-layer sizes
    # by loss); convert refuses a --calib it would ignore.
    calib=""
    if [ "$m" = activation ] || [ "$alloc" = layers ]; then
      calib="--calib $TEXT --calib-range 0:0.5 --calib-tokens 1000000"
    fi
    # shellcheck disable=SC2086
    ./build/bin/lrkv convert --checkpoint "$MODEL" $args --metric "$m" --allocation "$alloc" \
      --allocation-tokens 4096 $calib \
      --eval "$TEXT" --eval-range 0.5:1 --out "$work/$i" --json > "$work/$i.json"
    echo "${entry%%|*}|$metric|$work/$i.json" >> "$work/index"
  done
done
python3 - "$work/index" <<'PY'
import json, sys
rows = {}
order = []
for line in open(sys.argv[1]):
    name, metric, path = line.strip().split("|")
    r = json.load(open(path))
    if name not in rows:
        order.append(name)
        rows[name] = {"r": r}
    rows[name][metric] = r["perplexity_after"]
    if metric.startswith("layers"):
        sizes = r.get("allocation", {}).get("sizes", [])
        rows[name][metric + "_plan"] = ",".join(str(v) for v in sizes)
    src = r["perplexity_before"]
    tokens = r["eval_tokens"]
print(f"source stories260K: perplexity {src:.4f} on the second half ({tokens} tokens); "
      "calibration: first half\n")
print("| config | cache vs source | K/V params vs source | ppl (weight) | ppl (activation) "
      "| ppl (weight, per-layer sizes) | ppl (activation, per-layer sizes) |")
print("|---|---:|---:|---:|---:|---:|---:|")
def layers(x, key):
    if key not in x:
        return "-"
    plan = x[key + "_plan"]
    return f"{x[key]:.3f}" + (f" ({plan})" if plan else " (uniform kept)")
for name in order:
    x = rows[name]
    r = x["r"]
    print(f"| {name} | {100*r['cache_ratio_to_source']:.1f}% | "
          f"{100*r['kv_param_ratio_to_source']:.1f}% | {x['weight']:.3f} | {x['activation']:.3f} "
          f"| {layers(x, 'layers-weight')} | {layers(x, 'layers')} |")
PY
