#!/usr/bin/env bash
# The CLI contract (clients/cli/commands.h), checked for every subcommand, here and
# through a real lrkvd: each error path exits with its documented code (0 ok, 1 a check
# failed, 2 usage or invalid input, 3 server or transport), and with --json stdout is
# one JSON document and nothing else, whatever else the command prints on stderr.
#   cli_contract_test.sh BUILD_DIR SHARED_DIR
set -uo pipefail
build=$(realpath "$1")
shared=$(realpath "$2")
lrkv="$build/bin/lrkv"
model="$shared/models/stories260K.gguf"
text="$shared/data/tinystories-valid-excerpt.txt"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
export LRKV_NO_PROGRESS=1
printf "{%% macro f() %%}x{%% endmacro %%}" >"$work/bad.jinja"
unset LRKV_SERVER LRKV_TOKEN_FILE LRKV_TLS_CA
failures=0 checked=0

# expect RC [--json] [--stderr REGEX] -- COMMAND...: runs lrkv COMMAND; the exit code
# must be RC; with --json, stdout must parse as one JSON value; with --stderr, stderr
# must match REGEX.
expect() {
  local want=$1 json=0 pattern=""
  shift
  while [ "$1" != "--" ]; do
    case $1 in
      --json) json=1 ;;
      --stderr) pattern=$2; shift ;;
    esac
    shift
  done
  shift
  "$lrkv" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  checked=$((checked + 1))
  local why=""
  [ "$rc" -eq "$want" ] || why="exit $rc, want $want"
  if [ -z "$why" ] && [ "$json" -eq 1 ] &&
     ! python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$work/out" 2>/dev/null; then
    why="stdout is not one JSON document: $(head -c 300 "$work/out")"
  fi
  if [ -z "$why" ] && [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$work/err"; then
    why="stderr does not match /$pattern/"
  fi
  if [ -n "$why" ]; then
    failures=$((failures + 1))
    echo "FAIL: lrkv $*: $why" >&2
    sed 's/^/    stderr: /' "$work/err" | head -5 >&2
  fi
}

echo "== local"
# Usage, did-you-mean, version.
expect 2 --stderr "did you mean 'convert'" -- convrt
expect 2 --stderr "did you mean '--checkpoint'" -- eval --chekpoint "$model" --text "$text"
expect 0 -- --version
expect 0 -- version
expect 0 --json -- --json version
expect 0 --json -- sysinfo --json
# eval / generate / tokenize
expect 0 --json -- eval --checkpoint "$model" --text "$text" --json
expect 0 --json -- --json eval --checkpoint "$model" --text "$text"
expect 0 --json -- eval --checkpoint "$model" --text "$text" --limit 3 --json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["stories"] == 3, j' "$work/out" ||
  { echo "FAIL: eval --limit 3 did not score 3 documents" >&2; failures=$((failures + 1)); }
expect 2 -- eval --checkpoint "$model"
# lrkv serve and bench serve refuse bad settings before binding anything.
expect 2 --stderr "not a checkpoint" -- serve --checkpoint "$text"
expect 2 --stderr "kv-memory|byte size|size" -- serve --checkpoint "$model" --kv-memory lots
expect 2 --stderr "certificate and a key" -- serve --checkpoint "$model" --tls-cert "$text"
expect 2 --stderr "api-key" -- serve --checkpoint "$model" --api-key "$work/no-such-key"
expect 2 --stderr "is not supported" -- serve --checkpoint "$model" --chat-template "$work/bad.jinja"
expect 2 --stderr "exceed the context" -- bench serve --checkpoint "$model" --ctx 64 --prompt-tokens 60 --max-tokens 10
expect 2 --stderr "context must exceed" -- bench serve --checkpoint "$model" --ctx 64 --prompt-tokens 8 --max-tokens 8 --engine-steps 40
# A whole bench serve, small: JSON on stdout, each phase of each model named on stderr
# as it begins, in order.
expect 0 --json -- bench serve --checkpoint "$model" --source "$model" --ctx 64 --clients 2 --requests 1 --prompt-tokens 8 --max-tokens 8 --kv-memory 8MiB --max-seqs 4 --engine-steps 2 --soak-seconds 1 --json
phases=$(sed -n 's/^bench serve \[\([0-9]*\)\/12\] \([a-z]*: [a-z0-9 ]*\) (started.*/\1 \2/p' "$work/err" | tr '\n' ';')
want="1 converted: loading;2 converted: admission;3 converted: 1 stream;4 converted: 2 streams;5 converted: engines alone;6 converted: soak;7 source: loading;8 source: admission;9 source: 1 stream;10 source: 2 streams;11 source: engines alone;12 source: soak;"
[ "$phases" = "$want" ] ||
  { echo "FAIL: bench serve phases on stderr: $phases" >&2; failures=$((failures + 1)); }
expect 2 --stderr "not a checkpoint" -- eval --checkpoint "$text" --text "$text"
expect 2 --stderr "a binary file, not text" -- eval --checkpoint "$model" --text "$model"
expect 2 --stderr "no such file" -- eval --checkpoint /nope.gguf --text "$text"
expect 0 --json -- generate --checkpoint "$model" --prompt "Once upon" --max-tokens 4 --json
expect 2 -- generate --checkpoint "$model"
expect 0 --json -- tokenize --checkpoint "$model" --prompt "Once upon" --json
expect 2 -- tokenize --checkpoint "$model"
# cache
expect 0 --json -- cache --layers 5 --heads 8 --head-dim 8 --rank 2 --json
expect 2 --stderr "int4" -- cache --layers 5 --heads 8 --head-dim 8 --rank 2 --dtype int4
expect 2 --stderr "exactly one of" -- cache --layers 5 --heads 8 --head-dim 8
expect 2 --stderr "give --checkpoint, or the shape" -- cache --heads 8 --head-dim 8 --rank 2
# cache --checkpoint plans what convert plans for the same model and budget
expect 0 --json -- cache --checkpoint "$model" --budget 0.5 --json
cache_plan=$(python3 -c 'import json,sys; print([r["config"] for r in json.load(open(sys.argv[1])) if r["variant"] == "lrkv"][0])' "$work/out")
expect 0 --json -- convert --checkpoint "$model" --variant lrkv --budget 0.5 --out "$work/planned" --json
convert_plan=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"])' "$work/out")
[ "$cache_plan" = "$convert_plan" ] || { echo "FAIL: cache plans '$cache_plan', convert '$convert_plan'" >&2; failures=$((failures + 1)); }
# --rope-mode auto (the default): LRKV plane, reconstruct for an odd --rank; --help says so
auto_mode=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rope_mode"])' "$work/out")
[ "$auto_mode" = plane ] || { echo "FAIL: the default LRKV conversion used RoPE mode '$auto_mode', not plane" >&2; failures=$((failures + 1)); }
expect 0 --json -- convert --checkpoint "$model" --variant lrkv --rank 1 --out "$work/odd" --json
odd_mode=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rope_mode"])' "$work/out")
[ "$odd_mode" = reconstruct ] || { echo "FAIL: --rank 1 with RoPE mode auto used '$odd_mode', not reconstruct" >&2; failures=$((failures + 1)); }
expect 0 -- convert --help
grep -q "auto: LRKV plane (reconstruct for an odd --rank)" "$work/out" || { echo "FAIL: convert --help does not state the auto rule" >&2; failures=$((failures + 1)); }
expect 2 --stderr "--rank -1 must be at least 0" -- cache --layers 5 --heads 8 --head-dim 8 --rank -1
# convert
expect 2 --stderr "--out is required" -- convert --checkpoint "$model" --variant lrkv --rank 2
expect 2 --stderr "not both" -- convert --checkpoint "$model" --variant lrkv --rank 2 --budget 0.5 --out "$work/x"
expect 2 --stderr "--variant 'foo' must be one of lrkv, gqa, mqa, mla" -- convert --checkpoint "$model" --variant foo --rank 2 --out "$work/x"
expect 2 --stderr "--variant 'mha' must be one of" -- convert --checkpoint "$model" --variant mha --budget 0.5 --out "$work/x"
expect 2 --stderr "--rank -1 must be at least 0" -- convert --checkpoint "$model" --variant lrkv --rank -1 --out "$work/x"
expect 2 --stderr "must lie in \[0, 8\]" -- convert --checkpoint "$model" --variant lrkv --rank 9 --out "$work/x"
[ ! -e "$work/x" ] || { echo "FAIL: a refused convert wrote $work/x" >&2; failures=$((failures + 1)); }
# What the writer cannot write is refused before any work (the issue: after 160 s of
# decomposition): a factored layout has no GGUF form llama.cpp runs.
expect 2 --stderr "lrkv checkpoint has no GGUF form llama.cpp runs" -- convert --checkpoint "$model" --variant lrkv --rank 2 --format gguf --out "$work/x"
! grep -q "decomposition" "$work/err" || { echo "FAIL: convert --format gguf of an LRKV model started decomposing before refusing" >&2; failures=$((failures + 1)); }
# MLA in a DeepSeek format: decoupled RoPE with the latent norm by default; the norm
# turned off there, or asked of another scheme, is refused up front.
expect 2 --stderr "always applies the latent's RMSNorm" -- convert --checkpoint "$model" --variant mla --budget 0.5 --format deepseek --no-latent-norm --out "$work/x"
expect 2 --stderr "--latent-norm is the RMSNorm of DeepSeek's MLA latent" -- convert --checkpoint "$model" --variant lrkv --rank 2 --latent-norm --out "$work/x"
[ ! -e "$work/x" ] || { echo "FAIL: a refused convert wrote $work/x" >&2; failures=$((failures + 1)); }
expect 0 --json -- convert --checkpoint "$model" --variant mla --budget 0.5 --format gguf --out "$work/deepseek2" --json
python3 - "$work/out" <<'PY' || failures=$((failures + 1))
import json, sys
r = json.load(open(sys.argv[1]))
assert r["rope_mode"] == "partial" and r["latent_norm"] is True, (r["rope_mode"], r.get("latent_norm"))
assert all(l["latent_norm_error"] is None for l in r["layers"]), "γ without --calib reported an error"
PY
[ -s "$work/deepseek2/model.gguf" ] || { echo "FAIL: no deepseek2 model.gguf written" >&2; failures=$((failures + 1)); }
expect 0 --json -- convert --checkpoint "$model" --variant LRKV --rank 2 --rope-mode plane --out "$work/plane/nested" --json
expect 0 -- convert --checkpoint "$model" --variant lrkv --rank 2 --rope-mode reconstruct --out "$work/free"
expect 2 --stderr "exists and is not empty" -- convert --checkpoint "$model" --variant lrkv --rank 2 --out "$work/free"
# Never silent: a convert whose calibration and per-layer allocation each run for
# seconds prints a line at least every LRKV_PROGRESS_EVERY seconds in plain mode (0.5
# here; 10 by default), and the layers it has converted. The longest silence, start to
# exit, must stay under 3 intervals.
checked=$((checked + 1))
python3 - "$lrkv" "$model" "$text" "$work/quiet" <<'PY' || failures=$((failures + 1))
import os, subprocess, sys, time
lrkv, model, text, out = sys.argv[1:]
env = dict(os.environ, LRKV_PROGRESS_EVERY="0.5")
cmd = [lrkv, "convert", "--checkpoint", model, "--variant", "lrkv", "--rank", "2",
       "--metric", "activation", "--calib", text, "--allocation", "layers",
       "--eval", text, "--eval-range", "0.9:1", "--out", out]
t0 = last = time.monotonic()
worst, lines = 0.0, []
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
for line in iter(p.stderr.readline, b""):
    now = time.monotonic()
    worst, last = max(worst, now - last), now
    lines.append(line.decode().rstrip())
rc = p.wait()
worst = max(worst, time.monotonic() - last)
units = any(" 5/5 done" in l for l in lines)
if rc != 0 or worst > 1.5 or not units:
    print(f"FAIL: convert progress: exit {rc}, longest silence {worst:.2f} s over "
          f"{time.monotonic() - t0:.1f} s, a line with the layers done: {units}",
          file=sys.stderr)
    print("\n".join("    " + l for l in lines[-8:]), file=sys.stderr)
    sys.exit(1)
PY
# verify: 0 when every required check passes, 1 when one fails (its JSON still printed)
expect 0 --json -- verify --checkpoint "$work/plane/nested" --prompt-tokens 8 --decode-tokens 4 --json
expect 1 --json -- verify --checkpoint "$work/free" --rope-mode reconstruct,plane --prompt-tokens 8 --decode-tokens 4 --json --json-out "$work/v.json" --junit "$work/v.xml"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$work/v.json" || { echo "FAIL: --json-out" >&2; failures=$((failures + 1)); }
expect 2 -- verify --checkpoint "$work/free" --prompt-tokens 0
expect 2 -- verify
# A dense model has no factored decoding to check: said, exit 2, unless --source gives
# it a fidelity to measure.
expect 2 --stderr "nothing to verify: the checkpoint's K/V cache is dense" -- verify --checkpoint "$model"
# quality gates: a bound no conversion meets is exit 1 naming the figure; gates without
# the source and text they measure against are exit 2
expect 1 -- verify --checkpoint "$work/plane/nested" --source "$model" --text "$text" --rope-mode plane --prompt-tokens 8 --decode-tokens 4 --fidelity-tokens 500 --min-top1 1 --max-kl 100
grep -q "top-1 agreement .* >= 1: FAIL" "$work/out" || { echo "FAIL: a failed gate is not in the table" >&2; failures=$((failures + 1)); }
expect 2 --stderr "give --source and --text" -- verify --checkpoint "$work/plane/nested" --max-kl 0.1
expect 2 --stderr "--min-top1 2 must lie in \[0, 1\]" -- verify --checkpoint "$work/plane/nested" --min-top1 2
# a server command with no --server or $LRKV_SERVER says the address it tried is the default
expect 3 --stderr "the default address" -- pipeline --checkpoint "$model" --convert '{"rank": 2}'
# SIGTERM stops a long local command at its next safe point: exit 3, and neither the
# output folder nor its .partial staging folder is left behind
"$lrkv" heal --checkpoint "$work/free" --teacher "$model" --data "$text" --steps 1000000 --batch 2 --seq-len 32 --eval-every 0 --no-keep-best --out "$work/hk" >/dev/null 2>"$work/hk.err" &
hk_pid=$!
for _ in $(seq 1 100); do grep -q "training" "$work/hk.err" 2>/dev/null && break; sleep 0.2; done
sleep 1
kill -TERM "$hk_pid"
wait "$hk_pid"; hk_rc=$?
checked=$((checked + 1))
if [ "$hk_rc" -ne 3 ] || [ -e "$work/hk" ] || [ -e "$work/hk.partial" ] || ! grep -q "stopping at the next safe point" "$work/hk.err"; then
  echo "FAIL: SIGTERM during heal: exit $hk_rc (want 3), left: $(ls -d "$work"/hk* 2>/dev/null | tr '\n' ' ')" >&2
  sed 's/^/    stderr: /' "$work/hk.err" | tail -5 >&2
  failures=$((failures + 1))
fi
# heal (the default warmup works with few steps)
expect 0 --json -- heal --checkpoint "$work/free" --teacher "$model" --data "$text" --data-range 0:0.2 --steps 3 --batch 2 --seq-len 32 --out "$work/healed" --json
expect 2 --stderr "--warmup 10 must lie" -- heal --checkpoint "$work/free" --teacher "$model" --data "$text" --steps 3 --warmup 10 --out "$work/h2"
expect 2 -- heal --checkpoint "$work/free" --steps 3 --out "$work/h3"
# compare
expect 2 --stderr "'foo'" -- compare --checkpoint "$model" --eval "$text" --variants lrkv,foo
expect 0 --json -- compare --checkpoint "$model" --eval "$text" --eval-range 0.9:1 --budget 0.5 --variants lrkv --rope-mode plane --context 16 --timed-tokens 1 --kl-tokens 50 --work-dir "$work/cmp" --json
# -f: a YAML file of options, the command line overriding it; unknown keys refused.
cat >"$work/study.yaml" <<EOF
checkpoint: $model
budget: [0.5]
variants: [lrkv]
rope_mode: plane
eval: $text
eval_range: "0.9:1"
context: [64]
timed_tokens: 1
kl_tokens: 50
EOF
expect 0 --json -- compare -f "$work/study.yaml" --context 16 --work-dir "$work/cmp2" --json
python3 - "$work/out" <<'PY' || failures=$((failures + 1))
import json, sys
j = json.load(open(sys.argv[1]))
if j["run_config"]["contexts"] != [16] or j["run_config"]["budgets"] != [0.5]:
    sys.exit("FAIL: -f values or the overriding flag were not applied: %s" % j["run_config"])
if "budget: [0.5]" not in j["provenance"]["config_file"]["text"]:
    sys.exit("FAIL: the report does not keep the option file")
PY
echo "bogus_key: 1" >>"$work/study.yaml"
expect 2 --stderr "'bogus-key' is not an option" -- compare -f "$work/study.yaml"
expect 2 -- compare -f "$work/nope.yaml"
# bench
expect 0 --json -- bench decode --heads 2 --head-dim 8 --rank 2 --batch 1 --context 32 --iterations 1 --threads 1 --json
expect 2 --stderr "must be one of cpu, cuda" -- bench decode --device tpu --context 32
expect 0 --json -- bench generate --checkpoint "$work/free" --context 16 --tokens 2 --json
expect 2 --stderr "unknown decode mode" -- bench generate --checkpoint "$work/free" --mode bogus --context 16 --tokens 2
expect 2 --stderr "--rounds 0 must lie in \[1, 100\]" -- bench generate --checkpoint "$work/free" --context 16 --tokens 2 --rounds 0
# Rounds against the source: every row pools rounds x tokens steps, and each
# converted row carries one same-round ratio to the source per round.
expect 0 --json -- bench generate --checkpoint "$work/free" --source "$model" --context 16 --tokens 2 --rounds 2 --json
python3 - "$work/out" <<'PY' || { failures=$((failures + 1)); echo "FAIL: bench generate --rounds 2: rows do not pool two rounds" >&2; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["rounds"] == 2, j["rounds"]
for r in j["rows"]:
    assert r["decode_tokens"] == 4, r
    assert len(r["round_step_ms_median"]) == 2, r
    if r["model"] == "converted":
        ratios = r["round_step_ratio_to_source"]
        src = next(x for x in j["rows"] if x["model"] == "source")
        assert ratios == [a / b for a, b in zip(r["round_step_ms_median"], src["round_step_ms_median"])], r
    else:
        assert "round_step_ratio_to_source" not in r, r
PY
expect 0 --json -- bench convert --layers 1 --hidden 64 --heads 4 --head-dim 16 --rank 2 --iters 1 --json
expect 2 --stderr "--variant 'foo' must be one of lrkv, gqa, mqa, mla" -- bench convert --layers 1 --hidden 64 --heads 4 --head-dim 16 --variant foo
expect 2 -- bench tokenize --checkpoint "$model"
expect 0 --json -- bench tokenize --checkpoint "$model" --text "$text" --repeats 1 --json
# init
expect 0 --json -- init --tokenizer-from "$model" --layers 1 --hidden 32 --heads 4 --out "$work/init" --json
expect 2 -- init --tokenizer-from "$model"

echo "== through lrkvd"
# NAME [lrkvd options...]: sets server_port. Not called in $(...), so that the pid reaches
# this shell's pids and cleanup stops the server before removing its data directory.
start_server() {
  local name=$1; shift
  mkdir -p "$work/$name"
  "$build/bin/lrkvd" --listen 127.0.0.1:0 --data-dir "$work/$name" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    server_port=$(sed -n 's/^lrkvd listening on port \([0-9]*\)$/\1/p' "$work/$name.log")
    [ -n "$server_port" ] && return
    sleep 0.1
  done
  echo "lrkvd $name did not start" >&2; cat "$work/$name.log" >&2; exit 1
}
mkdir -p "$work/reg"
cp -r "$work/free" "$work/reg/free"  # a converted folder: weights, config, tokenizer, reports
start_server plain --allow-dir "$shared" --allow-dir "$work/reg"
port=$server_port
server="127.0.0.1:$port"
# Global options before or after the subcommand.
expect 0 --json -- --server "$server" jobs list --json
expect 0 --json -- jobs list --server "$server" --json
expect 0 --stderr "no jobs" -- jobs list --server "$server"
export LRKV_SERVER=$server
expect 0 --json -- register "$model" --json
expect 2 --stderr "PERMISSION_DENIED" -- register /etc/passwd
expect 0 --json -- upload "$model" --json
# The same folder registered and uploaded is one checkpoint (its reports aside).
expect 0 --json -- register "$work/reg/free" --json
reg_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/out")
expect 0 --json -- upload "$work/free" --json
up_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/out")
[ "$reg_id" = "$up_id" ] ||
  { echo "FAIL: register and upload of one folder gave $reg_id and $up_id" >&2; failures=$((failures + 1)); }
expect 2 --stderr "no such file" -- upload /nope.gguf
expect 0 --json -- convert --checkpoint "$model" --variant lrkv --rank 2 --rope-mode plane --json
expect 2 --stderr "rank" -- convert --checkpoint "$model" --variant lrkv --rank 99
# --out downloads the server's checkpoint (sha256-checked): byte for byte the job's.
expect 0 --json -- convert --checkpoint "$model" --variant lrkv --rank 2 --out "$work/dl" --json
"$lrkv" jobs list --kind convert --state succeeded --json >"$work/jobs.json"
last=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][-1]["id"])' "$work/jobs.json")
diff -r "$work/dl" "$work/plain/artifacts/$last" >/dev/null ||
  { echo "FAIL: the downloaded checkpoint differs from the job's" >&2; failures=$((failures + 1)); }
expect 0 --json -- artifacts get "$last" --out "$work/dl2" --json
diff -r "$work/dl2" "$work/plain/artifacts/$last" >/dev/null ||
  { echo "FAIL: artifacts get wrote another folder than the job's" >&2; failures=$((failures + 1)); }
expect 2 --stderr "exists and is not empty" -- artifacts get "$last" --out "$work/dl2"
expect 2 --stderr "NOT_FOUND" -- artifacts get job-nope --out "$work/dl3"
[ ! -e "$work/dl3" ] || { echo "FAIL: a refused download left $work/dl3" >&2; failures=$((failures + 1)); }
expect 0 --json -- convert --checkpoint "$model" --variant lrkv --rank 2 --detach --json
job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' "$work/out")
expect 0 --json -- jobs get "$job" --json
expect 0 -- jobs watch "$job"
expect 2 --stderr "NOT_FOUND" -- jobs get job-nope
expect 2 --stderr "NOT_FOUND" -- jobs cancel job-nope
expect 2 --stderr "NOT_FOUND" -- jobs watch job-nope
expect 0 --json -- submit convert --checkpoint "$model" --params '{"rank": 2}' --detach --json
expect 2 --stderr "job kind 'bogus'" -- submit bogus --checkpoint "$model"
expect 2 --stderr "give --checkpoint-id or --checkpoint" -- submit convert
expect 2 --stderr "rank" -- submit convert --checkpoint "$model" --params '{"rank": 99}'
expect 2 --stderr "'foo'" -- compare --checkpoint "$model" --eval "$text" --variants lrkv,foo
expect 2 --stderr "--checkpoint is required" -- bench decode --context 32
expect 0 --json -- report "$job" --json
expect 2 --stderr "NOT_FOUND" -- report job-nope
expect 0 --json -- verify --checkpoint "$work/plane/nested" --prompt-tokens 8 --decode-tokens 4 --detach --json
vjob=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' "$work/out")
"$lrkv" jobs watch "$vjob" >/dev/null 2>&1
expect 2 --stderr "writes no checkpoint" -- artifacts get "$vjob" --out "$work/dl4"
expect 0 --json -- verify --checkpoint "$work/plane/nested" --prompt-tokens 8 --decode-tokens 4 --json
expect 1 --json -- verify --checkpoint "$work/free" --rope-mode plane --prompt-tokens 8 --decode-tokens 4 --json
expect 2 -- verify --checkpoint "$work/free" --prompt-tokens 0
expect 2 --stderr "nothing to verify" -- verify --checkpoint "$model"
# The remote verify writes the local one's JUnit: the same testcases (classname and
# name), failures and skipped; and prints the same table.
expect 1 -- verify --checkpoint "$work/free" --rope-mode reconstruct,plane --prompt-tokens 8 --decode-tokens 4 --junit "$work/rv.xml"
grep -q "verdict: FAIL" "$work/out" || { echo "FAIL: the remote verify did not print the verify table" >&2; failures=$((failures + 1)); }
for pattern in '<testcase classname="[^"]*" name="[^"]*"' '<failure' '<skipped'; do
  if [ "$(grep -o "$pattern" "$work/v.xml")" != "$(grep -o "$pattern" "$work/rv.xml")" ]; then
    echo "FAIL: local and remote JUnit differ in $pattern" >&2; failures=$((failures + 1))
  fi
done
expect 0 --json -- heal --checkpoint "$work/free" --teacher "$model" --data "$text" --data-range 0:0.2 --steps 3 --batch 2 --seq-len 32 --json
expect 0 --json -- bench decode --checkpoint "$model" --context 32 --iterations 1 --json
expect 0 --json -- pipeline --checkpoint "$model" --convert '{"rank": 2, "rope_mode": "plane"}' --verify '{"prompt_tokens": 8, "decode_tokens": 4}' --bench '{"context": 16, "tokens": 2}' --json
expect 2 -- pipeline --checkpoint "$model" --convert '{"rank": 2.5}'
cat >"$work/job.yaml" <<EOF
checkpoint: $model
convert: {variant: lrkv, rank: 2, rope_mode: plane}
verify: {prompt_tokens: 8, decode_tokens: 4}
bench: {context: 16, tokens: 2}
EOF
expect 0 --json -- pipeline -f "$work/job.yaml" --detach --json
pjob=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' "$work/out")
expect 0 -- jobs watch "$pjob"
expect 0 --json -- jobs get "$pjob" --json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); p=json.loads(j["params_json"]); assert "rope_mode: plane" in p["config_file"]["text"] and j["state"]=="SUCCEEDED", j' "$work/out" ||
  { echo "FAIL: the pipeline job does not keep its option file or did not succeed" >&2; failures=$((failures + 1)); }
expect 0 --json -- jobs list --state succeeded --kind convert --json
expect 2 --stderr "--state 'bogus'" -- jobs list --state bogus
expect 0 --json -- jobs delete "$job" --json
expect 2 -- jobs delete "$job"
expect 0 --json -- --local --json cache --layers 5 --heads 8 --head-dim 8 --rank 2
unset LRKV_SERVER
# Connections that cannot work: 3 for the server side, 2 for a bad local file.
expect 3 --stderr "cannot reach lrkvd at 127.0.0.1:1" -- --server 127.0.0.1:1 jobs list
expect 2 --stderr "--token-file /nope: cannot read" -- --server "$server" --token-file /nope jobs list
echo "not a certificate" >"$work/bad.pem"
expect 2 --stderr "holds no PEM certificate" -- --server "$server" --tls-ca "$work/bad.pem" jobs list
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
start_server auth --auth-token-file "$work/token"
auth_port=$server_port
expect 3 --stderr "refused the credentials" -- --server "127.0.0.1:$auth_port" jobs list
expect 0 --json -- --server "127.0.0.1:$auth_port" --token-file "$work/token" jobs list --json

# Provenance in every report, local and from lrkvd: version, commit, host, date, and
# for a job the parameters and the checkpoint's sha256.
"$lrkv" --json eval --checkpoint "$model" --text "$text" >"$work/p1.json" 2>/dev/null
"$lrkv" --server "$server" report "$last" --json >"$work/p2.json" 2>/dev/null
python3 - "$work/p1.json" "$work/p2.json" <<'PY' || failures=$((failures + 1))
import json, sys
local, remote = (json.load(open(p)) for p in sys.argv[1:3])
for name, r in (("local eval", local), ("lrkvd convert", remote)):
    p = r.get("provenance", {})
    missing = [k for k in ("lrkv_version", "git_commit", "host", "cpu", "threads", "date") if k not in p]
    if missing:
        sys.exit("FAIL: %s report's provenance lacks %s" % (name, missing))
job = remote["provenance"]["job"]
if len(job.get("checkpoint_sha256", "")) != 64 or "params" not in job:
    sys.exit("FAIL: the job's provenance lacks its parameters or checkpoint sha256")
PY

echo "cli_contract: $checked cases, $failures failed"
[ "$failures" -eq 0 ]
