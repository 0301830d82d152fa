#!/usr/bin/env bash
# A CI gate through the service: start lrkvd on a free loopback port with a temporary
# data folder, register a checkpoint, run a verify job, write its checks as JUnit XML,
# stop the server, and fail (exit 1) when a check failed.
#   clients/ci_verify.sh CHECKPOINT [JUNIT_FILE] [PARAMS_JSON]
# Needs build/bin/lrkv and build/bin/lrkvd.
set -euo pipefail
checkpoint=$(realpath "$1")
# Paths are the caller's (the default JUnit lands in the caller's folder, not in this
# repository).
junit=$(realpath -m "${2:-lrkv-verify.xml}")
cd "$(dirname "$0")/.."
default_params='{"rope_mode": ["all"], "dtype": "both"}'
params="${3:-$default_params}"
source clients/lrkvd_local.sh
start_lrkvd "$(dirname "$checkpoint")"
id=$(./build/bin/lrkv register "$checkpoint" | cut -d' ' -f1)
job=$(./build/bin/lrkv submit verify --checkpoint-id "$id" --params "$params" --detach)
./build/bin/lrkv jobs watch "$job"
./build/bin/lrkv report "$job" --junit "$junit"
