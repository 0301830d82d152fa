#!/usr/bin/env bash
# The whole pipeline through the service on stories260K: start lrkvd on a free port with
# a temporary data folder, register the model, run a pipeline job (LRKV at budget 0.5,
# plane RoPE, 40 healing steps, verification, decode benchmark), watch it, print the
# report, stop the server. Needs build/bin/lrkv and build/bin/lrkvd.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=$(realpath "${LRKV_SHARED_DIR:-../shared}")
source clients/lrkvd_local.sh
start_lrkvd "$SHARED"
echo "lrkvd on $LRKV_SERVER, data in $LRKVD_DATA"
id=$(./build/bin/lrkv register "$SHARED/models/stories260K.gguf" | cut -d' ' -f1)
text="$SHARED/data/tinystories-valid-excerpt.txt"
params=$(cat <<JSON
{"convert": {"variant": "lrkv", "budget": 0.5, "rope_mode": "plane", "metric": "activation",
             "calib": "$text", "calib_range": "0:0.8"},
 "heal": {"data": "$text", "data_range": "0:0.8", "eval": "$text", "eval_range": "0.8:1",
          "steps": 40, "batch": 8, "seq_len": 256, "lr": 0.003, "warmup": 5, "eval_every": 20},
 "verify": {"text": "$text", "dtype": "both"},
 "bench": {"context": 1024, "tokens": 16}}
JSON
)
job=$(./build/bin/lrkv submit pipeline --checkpoint-id "$id" --params "$params" --detach)
echo "pipeline job $job"
./build/bin/lrkv jobs watch "$job"
./build/bin/lrkv report "$job" || true  # exit 1 means a check failed; show the summary anyway
./build/bin/lrkv report "$job" --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
c, h, v = r["convert"], r["heal"], r["verify"]
print(f"conversion: {c[\"config\"]}, cache {100*c[\"cache_ratio_to_source\"]:.1f}% of the source")
print(f"healing: perplexity {h[\"perplexity_before\"]:.4f} -> {h[\"perplexity_after\"]:.4f} (teacher {h[\"teacher_perplexity\"]:.4f})")
f = v.get("fidelity", {})
if f: print(f"fidelity: KL {f[\"kl_mean\"]:.4f} nats, top-1 {100*f[\"top1_agreement\"]:.1f}%")
for b in r["bench"]: print(f"decode: {b[\"model\"]:9} {b[\"engine\"]:11} {b[\"tokens_per_second\"]:8.1f} tokens/s at context {b[\"context\"]}")
print("verification:", "PASS" if v["passed"] else "FAIL")
'
