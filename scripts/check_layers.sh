#!/usr/bin/env bash
# Checks that the layers point one way (base ← kernels ← formats/tokenizers ← runtime ←
# surgery ← verify/train/study ← service/clients), by the #include lines of each folder:
#   base/     includes nothing of ours but base/
#   kernels/  includes nothing of ours but base/ and kernels/
#   model/    (formats, tokenizers) includes neither the runtime nor kernels/
#   runtime/  includes nothing from verify/, surgery/, train/, study/, service/
# Exit 1 naming each include that points the wrong way.
#   scripts/check_layers.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
status=0
# folder, then the extended regex of the include paths it must not name
check() {
  local folder="$1" forbidden="$2" hits
  hits=$(grep -rnE "#include \"($forbidden)/" "$folder" --include='*.h' --include='*.cc' \
           --include='*.cu' --include='*.cuh' || true)
  if [ -n "$hits" ]; then
    echo "$folder/ includes what lies above it:"
    echo "$hits"
    status=1
  fi
}
check base "kernels|model|runtime|surgery|verify|train|study|service|clients|proto"
check kernels "model|runtime|surgery|verify|train|study|service|clients|proto"
check model "kernels|runtime|surgery|verify|train|study|service|clients|proto"
check runtime "surgery|verify|train|study|service|clients"
echo "check_layers: base, kernels, model, runtime checked"
exit "$status"
