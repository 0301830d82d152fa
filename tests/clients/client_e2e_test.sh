#!/usr/bin/env bash
# The clients end to end against a real lrkvd on a free loopback port, started the way
# users start it. The server may read only the shared data folder, so every checkpoint
# reaches it by upload:
#   1. the Python client (Debian's python3-grpcio) uploads stories260K, runs a pipeline
#      job and prints the report (conversion, checks, cache, latency, loss rows);
#   2. `lrkv convert|verify|compare --server` submit jobs and print their reports, with
#      the documented exit codes (0 ok, 2 a parameter the server refused);
#   3. the compare job's page (`lrkv report JOB --html`) renders in headless Chromium:
#      a screenshot is taken and the rendered DOM holds non-empty SVG plots;
#   4. a TLS lrkvd (self-signed certificate made with openssl) answers a client that
#      trusts the certificate and refuses one that does not.
#   client_e2e_test.sh BUILD_DIR SOURCE_DIR SHARED_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
shared=$(realpath "$3")
lrkv="$build/bin/lrkv"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP_WORK:-}" ] && cp "$work"/*.png "$work"/*.html "$KEEP_WORK"/ 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# start_server NAME [lrkvd options...]: sets server_port. Not called in $(...): the pid
# must reach this shell's pids, or cleanup leaves the server running while it removes
# its data directory (a CI failure: "rm: cannot remove ...: Directory not empty").
start_server() {
  local name=$1; shift
  mkdir -p "$work/$name"
  "$build/bin/lrkvd" --listen 127.0.0.1:0 --data-dir "$work/$name" --allow-dir "$shared/data" \
    "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    server_port=$(sed -n 's/^lrkvd listening on port \([0-9]*\)$/\1/p' "$work/$name.log")
    [ -n "$server_port" ] && return
    sleep 0.1
  done
  cat "$work/$name.log" >&2
  fail "lrkvd $name did not start"
}

start_server plain
port=$server_port
export LRKV_SERVER="127.0.0.1:$port" LRKV_NO_PROGRESS=1
model="$shared/models/stories260K.gguf"
text="$shared/data/tinystories-valid-excerpt.txt"

echo "== 1. Python client: upload + pipeline"
PYTHONPATH="$build/python" /usr/bin/python3 "$src/clients/python/example_pipeline.py" \
  --checkpoint "$model" --text "$text" --heal-steps 4 | tee "$work/py.out"
grep -q "^conversion: lrkv r=2" "$work/py.out" || fail "python: no conversion row"
grep -q "^check plane fp32: EQUIVALENT (error .* ratio " "$work/py.out" || fail "python: no passing plane check with its error model numbers"
grep -q "^check partial fp32: n/a" "$work/py.out" || fail "python: n/a must read n/a"
grep -Eq "^loss curve: [4-9] points" "$work/py.out" || fail "python: no loss curve"
grep -q "^decode converted plane" "$work/py.out" || fail "python: no latency row"
grep -q "^verification: PASS" "$work/py.out" || fail "python: verification did not pass"

echo "== 2. lrkv commands through the server"
"$lrkv" convert --checkpoint "$model" --variant lrkv --rank 2 --rope-mode plane \
  | tee "$work/convert.out"
grep -q "^conversion   .* -> lrkv r=2 (weight metric, RoPE plane)" "$work/convert.out" \
  || fail "remote convert: no conversion table"
grep -q "of MHA$" "$work/convert.out" || fail "remote convert: no cache line"
grep -Eq "^ +4 +2 +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9]+$" "$work/convert.out" \
  || fail "remote convert: no per-layer table (layer 4)"
set +e
"$lrkv" convert --checkpoint "$model" --variant lrkv --rank 99 2>"$work/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a job the server refuses at submission (invalid input) must exit 2, got $rc"
grep -q "rank" "$work/bad.err" || fail "the refusal must name the parameter"
"$lrkv" compare --checkpoint "$model" --budget 0.5 --variants gqa,lrkv --rope-mode plane \
  --eval "$text" --eval-range 0.9:1 --context 32,64 --timed-tokens 2 --kl-tokens 200 \
  --html "$work/compare.html" | tee "$work/compare.out"
grep -q "| 0.50 | lrkv r=2 | plane |" "$work/compare.out" || fail "compare table"
job=$("$lrkv" jobs list --state succeeded | awk '$2 == "COMPARE" {print $1}' | tail -1)
[ -n "$job" ] || fail "the compare job is not listed"
"$lrkv" report "$job" --html "$work/report.html" >/dev/null
cmp -s "$work/compare.html" "$work/report.html" || fail "--html of compare and report differ"

echo "== 3. the page renders in headless Chromium"
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || fail "chromium is not installed (scripts/setup.sh installs it)"
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars
       --user-data-dir="$work/chromium")
timeout 120 "$chromium" "${flags[@]}" --window-size=1200,2000 --screenshot="$work/page.png" \
  "file://$work/report.html" >/dev/null 2>&1 || true
[ -s "$work/page.png" ] || fail "no screenshot"
png_bytes=$(stat -c %s "$work/page.png")
[ "$png_bytes" -gt 20000 ] || fail "the screenshot is nearly empty ($png_bytes bytes)"
timeout 120 "$chromium" "${flags[@]}" --dump-dom "file://$work/report.html" \
  2>/dev/null >"$work/dom.html" || true
svgs=$(grep -o "<svg" "$work/dom.html" | wc -l)
lines=$(grep -o "<polyline" "$work/dom.html" | wc -l)
points=$(grep -o 'class="marker"' "$work/dom.html" | wc -l)
echo "rendered DOM: $svgs svg, $lines polylines, $points markers; screenshot $png_bytes bytes"
[ "$svgs" -eq 3 ] || fail "want 3 SVG plots in the rendered page, got $svgs"
[ "$lines" -ge 3 ] && [ "$points" -ge 6 ] || fail "the plots are empty"
bars=$(grep -o 'class="error-bar"' "$work/dom.html" | wc -l)
[ "$bars" -ge 3 ] || fail "the latency plot has no min-max error bars ($bars)"
grep -q "<h2>Summary</h2>" "$work/dom.html" || fail "the page has no summary of who wins"
grep -q 'id="run-config"' "$work/dom.html" || fail "the page does not show the run configuration"
grep -q "step vs MHA at L = 64" "$work/dom.html" || fail "the step ratio does not say its context"

echo "== 4. TLS"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
  -days 1 -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
start_server tls --tls-cert "$work/cert.pem" --tls-key "$work/key.pem"
tls_port=$server_port
"$lrkv" jobs list --server "localhost:$tls_port" --tls-ca "$work/cert.pem" >/dev/null \
  || fail "a client trusting the certificate must connect"
set +e
timeout 20 "$lrkv" jobs list --server "localhost:$tls_port" >/dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "a plaintext client must fail with exit 3 against TLS, got $rc"
PYTHONPATH="$build/python" /usr/bin/python3 - "$tls_port" "$work/cert.pem" "$src" <<'PY'
import sys
sys.path.insert(0, sys.argv[3] + "/clients/python")
from lrkv_client import LrkvClient
c = LrkvClient("localhost:" + sys.argv[1], ca_file=sys.argv[2])
print("python over TLS: %d jobs" % len(list(c.list())))
PY
echo "client_e2e: all checks passed"
