#!/usr/bin/env bash
# The whole pipeline through the service on stories260K: start lrkvd on a free port with
# a temporary data folder, upload the model (1 MiB chunks, sha256-checked), run a pipeline job (LRKV at budget 0.5,
# plane RoPE, 40 healing steps, verification, decode benchmark), watch it, print the
# report, stop the server. Needs build/bin/lrkv and build/bin/lrkvd.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=$(realpath "${LRKV_SHARED_DIR:-../shared}")
source clients/lrkvd_local.sh
# The server reads the text (calibration, healing, verification) from the shared data
# folder; the model itself is uploaded.
start_lrkvd "$SHARED/data"
echo "lrkvd on $LRKV_SERVER, data in $LRKVD_DATA"
id=$(./build/bin/lrkv upload "$SHARED/models/stories260K.gguf" | cut -d' ' -f1)
echo "uploaded stories260K.gguf as checkpoint $id"
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
LRKV_NO_PROGRESS=1 ./build/bin/lrkv jobs watch "$job"
./build/bin/lrkv report "$job" || true  # exit 1 means a check failed; show the summary anyway
./build/bin/lrkv report "$job" --json >"$LRKVD_DATA/report.json" || true
python3 - "$LRKVD_DATA/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c, h, v = r["convert"], r["heal"], r["verify"]
print("conversion: %s, cache %.1f%% of the source" % (c["config"], 100 * c["cache_ratio_to_source"]))
print("healing: perplexity %.4f -> %.4f (teacher %.4f)"
      % (h["perplexity_before"], h["perplexity_after"], h["teacher_perplexity"]))
f = v.get("fidelity")
if f:
    print("fidelity: KL %.4f nats, top-1 %.1f%%" % (f["kl_mean"], 100 * f["top1_agreement"]))
for b in r["bench"]:
    print("decode: %-9s %-11s %8.1f tokens/s at context %d"
          % (b["model"], b["engine"], b["tokens_per_second"], b["context"]))
print("verification:", "PASS" if v["passed"] else "FAIL")
PY
