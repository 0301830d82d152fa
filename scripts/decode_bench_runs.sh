#!/bin/sh
# Runs the issue-5 decode benchmark (the paper's 1.2B attention shape: H = 12,
# d_h = 128, r = 51, b = 4, bf16 cache, L = 8192, 2 threads) N times (default
# 10) and prints, per run and in total, how the LRKV steps on the tiled layout
# stand against the two acceptance bars: step time <= 1.15·ρ × MHA's, and
# >= 60 % of the streaming read bandwidth measured in the same run. One run of
# the bench cannot say how much a shared machine's memory moves between runs;
# several in a row can. Usage: scripts/decode_bench_runs.sh [N] [extra bench flags]
# THREADS (default 2) sets --threads; LRKV_BENCH (default "build/bin/lrkv bench
# decode") the command, e.g. "build/bin/lrkv-kernel-bench" on a host without
# LibTorch.
set -eu
cd "$(dirname "$0")/.."
n=${1:-10}
threads=${THREADS:-2}
bench=${LRKV_BENCH:-build/bin/lrkv bench decode}
[ $# -gt 0 ] && shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
i=1
while [ "$i" -le "$n" ]; do
  # shellcheck disable=SC2086  # $bench is a command and its words
  $bench --heads 12 --head-dim 128 --rank 51 --batch 4 --context 8192 \
    --cache-dtype bf16 --threads "$threads" "$@" --json-out "$dir/run$i.json" >/dev/null
  i=$((i + 1))
done
python3 - "$dir" "$n" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(os.path.join(d, "run%d.json" % i))) for i in range(1, n + 1)]
rho = runs[0]["cache_ratio"]
bar = 1.15 * rho
names = [r["variant"] for r in runs[0]["rows"]
         if r["variant"].startswith("lrkv") and "tiles" in r["config"]]
print("%d threads, %s kernels; bars: step <= %.3f x MHA (1.15 rho, rho = %.4f), "
      ">= 60%% of the stream" % (runs[0]["threads"], runs[0]["isa"], bar, rho))
print("run  stream GB/s  MHA ms  " + "  ".join("%-22s" % v for v in names))
met = {v: 0 for v in names}
for i, r in enumerate(runs, 1):
    rows = {x["variant"]: x for x in r["rows"]}
    cells = []
    for v in names:
        x = rows[v]
        ok = x["ratio_to_mha"] <= bar and x["bandwidth_fraction"] >= 0.6
        met[v] += ok
        cells.append("%5.2f ms %.3f %3.0f%% %s" % (x["median_ms"], x["ratio_to_mha"],
                                                 100 * x["bandwidth_fraction"],
                                                 "ok" if ok else "--"))
    print("%3d  %11.1f  %6.2f  %s" % (i, r["stream_gbps"], rows["mha"]["median_ms"],
                                      "  ".join(cells)))
print("runs meeting both bars: " +
      ", ".join("%s %d/%d" % (v, met[v], n) for v in names))
PY
