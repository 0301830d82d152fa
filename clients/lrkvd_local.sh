# Sourced by scripts that need a throwaway lrkvd: start_lrkvd ALLOW_DIR... starts one on
# a free loopback port with a temporary data folder, exports LRKV_SERVER, and stops it
# (and removes the folder) when the calling script exits.
start_lrkvd() {
  LRKVD_DATA=$(mktemp -d)
  local log="$LRKVD_DATA/lrkvd.log" allow=() dir
  : >"$log"
  for dir in "$@"; do allow+=(--allow-dir "$dir"); done
  ./build/bin/lrkvd --listen 127.0.0.1:0 --data-dir "$LRKVD_DATA" "${allow[@]}" >"$log" 2>&1 &
  LRKVD_PID=$!
  trap 'kill $LRKVD_PID 2>/dev/null; wait $LRKVD_PID 2>/dev/null; rm -rf "$LRKVD_DATA"' EXIT
  local port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/^lrkvd listening on port \([0-9]*\)$/\1/p' "$log" || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "lrkvd did not start:"; cat "$log"; exit 3; }
  export LRKV_SERVER="127.0.0.1:$port"
}
