#!/usr/bin/env bash
# Fails when a function of any source folder (.cc, .h, .cu, .cuh; methods in class
# bodies and test bodies included) runs over 120 lines, unless
# scripts/function_length_exceptions.txt lists it with its reason. A long function is
# a sign to split (small files and functions). The scanner is
# scripts/function_lengths.py.
#   scripts/check_function_length.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-120}
exec python3 scripts/function_lengths.py --limit "$limit" \
  --exceptions scripts/function_length_exceptions.txt \
  base kernels formats tokenizer model runtime exports surgery verify train study service serve clients proto fuzz tests
