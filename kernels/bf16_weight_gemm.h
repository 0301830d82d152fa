// Prefill-sized products with bf16-stored weights: y = bf16(x) Wᵀ for many activation
// rows x (eval, generate's prompt, bench generate's context), W [rows, cols] in bf16
// straight from the checkpoint's map. The activations are rounded to bf16 (nearest
// even) and the products summed in fp32 — llama.cpp's arithmetic for a bf16 model —
// by oneDNN's native bf16 matmul (AVX512-BF16, AMX), which measured 2.2x the fp32 GEMM
// of a widened weight on this project's 2-core Zen 4 and never widens W. Where oneDNN
// has no native bf16 kernel for the CPU the op reports it, and callers widen instead.
// A naive reference sits beside it.
#ifndef LRKV_KERNELS_BF16_WEIGHT_GEMM_H_
#define LRKV_KERNELS_BF16_WEIGHT_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"

namespace lrkv::kernels {

struct Bf16WeightGemmParams {
  const uint16_t* w = nullptr;  // [rows, cols] bf16, row-major
  int64_t rows = 0, cols = 0;
  int64_t batch = 0;            // activation rows
  const float* x = nullptr;     // [batch, cols]; rounded to bf16 by the op
  float* y = nullptr;           // [batch, rows]
};

// InvalidArgument for missing buffers or non-positive shapes.
absl::Status ValidateBf16WeightGemm(const Bf16WeightGemmParams& p);

// Whether this CPU runs oneDNN's bf16 matmul natively (AVX512-BF16 or AMX).
bool Bf16WeightGemmAvailable();

// The oneDNN product; FailedPrecondition where Bf16WeightGemmAvailable() is false.
absl::Status Bf16WeightGemm(const Bf16WeightGemmParams& p);

// One output at a time: bf16(x) times w, summed in float64 in index order, rounded to
// fp32.
absl::Status Bf16WeightGemmReference(const Bf16WeightGemmParams& p);

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_BF16_WEIGHT_GEMM_H_
