// The equivalence check of DESIGN.md §2: the same converted parameters decoded by the
// expanded engine (reference) and by a factored engine, teacher-forced through a prompt
// and then N greedy steps (both engines fed the reference's tokens), compared per step
// and per layer. fp32: max|Δ|/max|ref| <= 1e-5 for every layer output and the logits,
// and identical greedy tokens. bf16 caches: cosine distance <= 1e-5.
#ifndef LRKV_VERIFY_EQUIVALENCE_H_
#define LRKV_VERIFY_EQUIVALENCE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/llama_weights.h"
#include "verify/decode_engine.h"
#include "verify/verify_report.h"

namespace lrkv {

struct EquivalenceOptions {
  /// Prompt ids (BOS included), fed one token per step.
  std::vector<int32_t> prompt;
  /// Greedy steps after the prompt.
  int64_t decode_tokens = 16;
  /// Cache storage dtype of both engines (kFloat or kBFloat16).
  at::ScalarType cache_dtype = at::kFloat;
  /// Plane mode: the layout of the factored cache, and so which kernel reads it.
  FactoredCacheLayout factored_layout = FactoredCacheLayout::kAuto;
};

// Distances between a candidate and a reference tensor.
ErrorStats Compare(const at::Tensor& candidate, const at::Tensor& reference);

// Runs the reference and the `mode` engine side by side. A mode that does not apply to
// the model comes back with applicable = false and the reason.
absl::StatusOr<EquivalenceResult> CheckEquivalence(const ModelConfig& config,
                                                   const LlamaWeights& weights,
                                                   DecodeMode mode,
                                                   const EquivalenceOptions& options);

}  // namespace lrkv

#endif  // LRKV_VERIFY_EQUIVALENCE_H_
