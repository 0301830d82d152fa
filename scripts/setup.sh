#!/usr/bin/env bash
# Installs every Debian 12 package lrkv needs to build, test and run (docs/design.md, "Dependencies").
# Idempotent: packages already present are left alone. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp libdnnl-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libsqlite3-dev sqlite3 libssl-dev libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libgloo-dev
  python3-grpcio python3-protobuf openssl chromium bible-kjv bible-kjv-text
  clang libclang-rt-14-dev
  libonig-dev libutf8proc-dev libyaml-cpp-dev libboost-dev zlib1g-dev libbrotli-dev
)
# Node.js runs the test references (tests/js: Hugging Face tokenizers in JS,
# llama.cpp); a machine that already has a node keeps it.
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages already installed"
fi

# LibTorch falls back to Debian's reference BLAS unless the OpenMP OpenBLAS is the
# selected libblas.so.3 alternative; that makes matrix products ~15x slower.
arch_lib="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
openblas="$arch_lib/openblas-openmp/libblas.so.3"
if [ -e "$openblas" ]; then
  $SUDO update-alternatives --set "libblas.so.3-$(basename "$arch_lib")" "$openblas" >/dev/null 2>&1 || true
  $SUDO update-alternatives --set "liblapack.so.3-$(basename "$arch_lib")" \
    "$arch_lib/openblas-openmp/liblapack.so.3" >/dev/null 2>&1 || true
fi
selected=$(readlink -f "$arch_lib/libblas.so.3" || true)
echo "setup: libblas.so.3 -> $selected"
case "$selected" in
  *openblas-openmp*) echo "setup: OpenBLAS (OpenMP) is the active BLAS" ;;
  *) echo "setup: WARNING: the active BLAS is not OpenBLAS-OpenMP; LibTorch will be slow" >&2 ;;
esac

# Test references from npm, pinned by tests/js/package-lock.json (never committed:
# node_modules is ignored). Re-installed only when the lock file changed.
js_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/js"
stamp="$js_dir/node_modules/.lrkv-installed-lock.json"
if ! cmp -s "$js_dir/package-lock.json" "$stamp"; then
  echo "setup: installing the npm test references into tests/js/node_modules"
  # `npm install` on the lock file rather than `npm ci`: node-llama-cpp lists prebuilt
  # binaries for platforms npm does not lock, which `npm ci` refuses; optional
  # packages (GPU builds) and install scripts are skipped, the lock is not rewritten.
  (cd "$js_dir" && rm -rf node_modules &&
     npm install --no-audit --no-fund --loglevel=error --omit=optional --ignore-scripts \
       --no-save)
  cp "$js_dir/package-lock.json" "$stamp"
else
  echo "setup: npm test references already installed"
fi
