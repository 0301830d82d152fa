// Decode-step attention kernels: standard MHA/GQA and factored (LRKV / absorbed
// MLA), each with a naive reference beside it. The optimised entry points pick
// the best build the CPU runs (AVX-512, AVX2/FMA, generic; the fused tiled
// kernel with AVX512-BF16) at run time and use OpenMP across sequences and
// position chunks. See decode_params.h for the cache layouts.
#ifndef LRKV_KERNELS_DECODE_ATTENTION_H_
#define LRKV_KERNELS_DECODE_ATTENTION_H_

#include <string>

#include "absl/status/status.h"
#include "kernels/decode_params.h"

namespace lrkv::kernels {

// InvalidArgument for inconsistent shapes or missing buffers.
absl::Status ValidateMha(const MhaDecodeParams& p);
absl::Status ValidateFactored(const FactoredDecodeParams& p);

absl::Status MhaDecode(const MhaDecodeParams& p);
absl::Status FactoredDecode(const FactoredDecodeParams& p);

// Two-pass softmax in float64, one head and one position at a time.
absl::Status MhaDecodeReference(const MhaDecodeParams& p);
absl::Status FactoredDecodeReference(const FactoredDecodeParams& p);

// Which implementation the optimised entry points run on this CPU ("avx512",
// "avx2", "generic").
const char* KernelIsa();
// Whether FactoredDecode runs the fused tiled kernel for CacheLayout::kTiles
// (AVX-512 with AVX512-BF16, not capped by ForceKernelIsa); otherwise a tiled
// cache is copied into rows first (correct, not fast). The same condition
// selects WeightMatVec's AVX512-BF16 path for bf16 activations.
bool TiledKernelAvailable();
// Tests: cap the implementation at "avx2" or "generic" ("" = the best
// available).
void ForceKernelIsa(const std::string& isa);

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_DECODE_ATTENTION_H_
