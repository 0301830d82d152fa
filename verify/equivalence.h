// The equivalence check of docs/design.md, "The math that must hold", judged by
// an error model. The same converted parameters are decoded, teacher-forced
// through a prompt and then N greedy steps (all fed the float64 engine's
// tokens), by
//   - the candidate (a factored mode, or the expanded engine),
//   - the plain expanded engine with a cache of the candidate's storage dtype,
//   through
//     its kernel and through ATen (two orders of operations, as
//     FlashAttention's reference uses reorder_ops),
//   - the candidate's own algorithm through ATen, in fp32 with that storage and
//   in
//     float64 (what rounding costs a factored cache, which stores other values
//     than a standard one; no algorithmic difference enters it, both sides
//     decode alike),
//   - the expanded engine in float64: the truth.
// At every layer output and the logits, the candidate's RMS error against the
// truth over the run must stay within 2·max(plain errors, own rounding) + atol
// (twice fp32's rounding of the truth): FlashAttention's rule
// (hopper/test_flash_attn.py) on RMS errors. Max errors spread more than 2x
// between equally accurate fp32 computations (measured 2.2x: the fused plane
// kernel against its ATen twin), RMS errors by < 1.5x; wrong decodes are >=
// 3e5x off in fp32. Greedy tokens must equal float64's except at ties within
// the max-error bound; any NaN/Inf fails. A fixed tolerance flips with the
// CPU's rounding (AVX-512 against AVX2); a ratio to measured rounding does not.
#ifndef LRKV_VERIFY_EQUIVALENCE_H_
#define LRKV_VERIFY_EQUIVALENCE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "formats/config.h"
#include "runtime/decode_engine.h"
#include "runtime/llama_weights.h"
#include "verify/verify_report.h"

namespace lrkv {

// The three reference engines of a check (the plain expanded engine through the
// kernel and through ATen, and the float64 truth), stepped once and remembered:
// they do not depend on the mode checked, and the run is teacher-forced on the
// truth's greedy tokens, so every mode of one dtype reads the same steps. The
// checks' own engines step beside them (Companions), so that one pass over the
// weights per compute dtype serves every engine of a step.
class ReferenceEngines {
 public:
  struct StepOutputs {
    int32_t token = 0;
    // Logits [1, V], then each layer's attention output, per engine.
    at::Tensor truth_logits, plain_logits, reordered_logits;
    std::vector<at::Tensor> truth, plain, reordered;
  };

  // Engines of the checks stepped with the references (batch 1, decoding this
  // model from weights32() or weights64()), and their logits, in their order.
  struct Companions {
    std::vector<DecodeEngine*> fp32, f64;
    std::vector<at::Tensor> fp32_logits, f64_logits;
  };

  // InvalidArgument when the engines cannot be built for this model and dtype.
  static absl::StatusOr<std::unique_ptr<ReferenceEngines>> Create(
      const ModelConfig& config, const LlamaWeights& weights,
      at::ScalarType cache_dtype, int64_t capacity,
      FactoredCacheLayout factored_layout);

  // The outputs of step `step` fed `token` (run now, or remembered from an
  // earlier check; a different token at a remembered step is
  // FailedPrecondition). `with`'s engines are fed `token` too: in the
  // references' passes over the weights when the step runs now, by themselves
  // when it is remembered.
  absl::StatusOr<const StepOutputs*> At(int64_t step, int32_t token,
                                        Companions* with = nullptr);
  // The plain engine's cache after the steps run so far.
  CacheMeasurement PlainCache() const { return plain_->MeasureCache(); }
  at::ScalarType cache_dtype() const { return cache_dtype_; }
  // ForCompute of the weights in float32 and float64, for the checks' own
  // engines too (an 8B model's K/V converted once, not per check).
  const LlamaWeights& weights32() const { return weights32_; }
  const LlamaWeights& weights64() const { return weights64_; }

 private:
  ReferenceEngines() = default;
  at::ScalarType cache_dtype_ = at::kFloat;
  LlamaWeights weights32_, weights64_;
  std::unique_ptr<DecodeEngine> truth_, plain_, reordered_;
  std::vector<StepOutputs> steps_;
};

struct EquivalenceOptions {
  /// Prompt ids (BOS included), fed one token per step.
  std::vector<int32_t> prompt;
  /// Greedy steps after the prompt.
  int64_t decode_tokens = 16;
  /// Cache storage dtype of both engines (kFloat or kBFloat16).
  at::ScalarType cache_dtype = at::kFloat;
  /// Plane mode: the layout of the factored cache, and so which kernel reads
  /// it.
  FactoredCacheLayout factored_layout = FactoredCacheLayout::kAuto;
  /// A deliberate decoding error in the candidate only (the negative controls
  /// of the tests).
  DecodeFault fault = DecodeFault::kNone;
  /// The reference engines to read (shared by the checks of one dtype); null:
  /// the check runs its own.
  ReferenceEngines* references = nullptr;
  /// Polled before every step: CancelledError once it returns true.
  StopCheck should_stop;
  /// Told after every step: steps done of prompt + decode tokens.
  UnitProgress on_step;
};

// Distances between a candidate and a reference tensor.
ErrorStats Compare(const at::Tensor& candidate, const at::Tensor& reference);

// Runs the references and every mode's engines side by side, one step of all of
// them at a time; a result per mode, in order. A mode that does not apply to
// the model comes back with applicable = false and the reason.
absl::StatusOr<std::vector<EquivalenceResult>> CheckEquivalences(
    const ModelConfig& config, const LlamaWeights& weights,
    const std::vector<DecodeMode>& modes, const EquivalenceOptions& options);

// CheckEquivalences of one mode.
absl::StatusOr<EquivalenceResult> CheckEquivalence(
    const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
    const EquivalenceOptions& options);

}  // namespace lrkv

#endif  // LRKV_VERIFY_EQUIVALENCE_H_
