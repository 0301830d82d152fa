// Small-batch products with weights kept in their stored dtype: y = x Wᵀ for a few
// activation rows x (decode steps, verify's engines) and a weight matrix W [rows, cols]
// in bf16, f16 or fp32, read straight from the checkpoint's map. Each weight is widened
// exactly (bf16/f16 -> fp32 -> fp64 are exact) and accumulated in the activations'
// dtype, fp32 or fp64, so the product is that of the widened matrix without ever
// materialising it: the step streams the stored bytes once (half of fp32's for bf16),
// which is what bounds a memory-bound decode step. A naive reference sits beside it.
#ifndef LRKV_KERNELS_WEIGHT_MATVEC_H_
#define LRKV_KERNELS_WEIGHT_MATVEC_H_

#include <cstdint>

#include "absl/status/status.h"

namespace lrkv::kernels {

enum class WeightDType { kF32, kF16, kBF16 };

struct WeightMatVecParams {
  WeightDType dtype = WeightDType::kBF16;
  const void* w = nullptr;  // [rows, cols], row-major, little-endian
  int64_t rows = 0, cols = 0;
  int64_t batch = 0;        // activation rows
  // Exactly one precision: x [batch, cols] and y [batch, rows] in fp32 or in fp64.
  const float* x = nullptr;
  float* y = nullptr;
  const double* x64 = nullptr;
  double* y64 = nullptr;
  /// bf16 W and fp32 x only: x rounded to bf16 (nearest even) before the
  /// products, which are summed in fp32 — llama.cpp's arithmetic for a bf16
  /// model, and what a batched decode step under Bf16ProductsScope uses
  /// (AVX512-BF16's dot product does 2x the exact kernel's work per
  /// instruction; elsewhere the rounded x goes through the exact kernel).
  bool bf16_activations = false;
};

// InvalidArgument for missing buffers, non-positive shapes, both precisions
// set, or bf16_activations without bf16 W and fp32 x.
absl::Status ValidateWeightMatVec(const WeightMatVecParams& p);

// The optimised product (AVX-512, AVX2/F16C or generic build, OpenMP over rows): the
// build KernelIsa() names (decode_attention.h; ForceKernelIsa caps it for tests).
absl::Status WeightMatVec(const WeightMatVecParams& p);

// One output at a time, summed in float64 in index order (rounded to fp32 for
// fp32 y); with bf16_activations, of x rounded to bf16.
absl::Status WeightMatVecReference(const WeightMatVecParams& p);

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_WEIGHT_MATVEC_H_
