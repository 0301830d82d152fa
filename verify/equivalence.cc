// The equivalence check (see equivalence.h).
#include "verify/equivalence.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/status_macros.h"

namespace lrkv {
namespace {

constexpr double kRelTolerance = 1e-5;  // fp32: max|Δ|/max|ref|
constexpr double kCosTolerance = 1e-5;  // bf16: cosine distance

void Worst(ErrorStats* acc, const ErrorStats& e) {
  acc->max_abs = std::max(acc->max_abs, e.max_abs);
  acc->max_rel = std::max(acc->max_rel, e.max_rel);
  acc->cos_dist = std::max(acc->cos_dist, e.cos_dist);
}

}  // namespace

ErrorStats Compare(const at::Tensor& candidate, const at::Tensor& reference) {
  const auto c = candidate.to(at::kDouble).reshape({-1});
  const auto r = reference.to(at::kDouble).reshape({-1});
  ErrorStats e;
  e.max_abs = (c - r).abs().max().item<double>();
  const double ref_max = r.abs().max().item<double>();
  e.max_rel = ref_max > 0 ? e.max_abs / ref_max : e.max_abs;
  const double denom = c.norm().item<double>() * r.norm().item<double>();
  e.cos_dist =
      denom > 0 ? std::max(0.0, 1.0 - c.dot(r).item<double>() / denom) : 0.0;
  return e;
}

absl::StatusOr<EquivalenceResult> CheckEquivalence(
    const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
    const EquivalenceOptions& o) {
  if (o.prompt.empty())
    return absl::InvalidArgumentError("the prompt is empty");
  if (o.decode_tokens < 0)
    return absl::InvalidArgumentError("decode tokens must be >= 0");
  const bool bf16 = o.cache_dtype == at::kBFloat16;
  EquivalenceResult r;
  r.mode = DecodeModeName(mode);
  r.dtype = bf16 ? "bf16" : "fp32";
  r.expected_equivalent = mode != DecodeMode::kNaive;
  EngineOptions eo;
  eo.cache_dtype = o.cache_dtype;
  eo.capacity = static_cast<int64_t>(o.prompt.size()) + o.decode_tokens;
  eo.factored_layout = o.factored_layout;
  at::NoGradGuard no_grad;
  auto candidate = CreateDecodeEngine(config, weights, mode, eo);
  if (!candidate.ok()) {
    r.applicable = false;
    r.reason = std::string(candidate.status().message());
    return r;
  }
  // fp32 (and the naive control): the independent expanded engine. bf16: the
  // same stored cache decoded through materialised K/V, so that both sides read
  // identical bf16 inputs; the storage error is measured separately against
  // fp32.
  EngineOptions ref_options = eo;
  DecodeMode ref_mode = DecodeMode::kExpanded;
  if (bf16 && mode != DecodeMode::kNaive) {
    ref_mode = mode;
    ref_options.materialize = true;
  }
  r.reference = ref_mode == DecodeMode::kExpanded
                    ? absl::StrCat("expanded engine, ", r.dtype, " cache")
                    : "the same bf16 cache through materialised per-head K/V";
  r.cache_layout = (*candidate)->cache_layout();
  auto reference = CreateDecodeEngine(config, weights, ref_mode, ref_options);
  if (!reference.ok()) return reference.status();
  std::unique_ptr<DecodeEngine> exact32, expanded16;
  if (bf16) {
    EngineOptions f32 = eo;
    f32.cache_dtype = at::kFloat;
    ASSIGN_OR_RETURN(exact32, CreateDecodeEngine(config, weights,
                                                 DecodeMode::kExpanded, f32));
    ASSIGN_OR_RETURN(expanded16, CreateDecodeEngine(config, weights,
                                                    DecodeMode::kExpanded, eo));
  }
  auto exceeds = [&](const ErrorStats& e) {
    return bf16 ? e.cos_dist > kCosTolerance : e.max_rel > kRelTolerance;
  };
  auto note_bad = [&](int64_t step, int64_t layer, const ErrorStats& e) {
    if (r.first_bad_step >= 0 || !exceeds(e)) return;
    r.first_bad_step = step;
    r.first_bad_layer = layer;
    r.first_bad_error = bf16 ? e.cos_dist : e.max_rel;
  };
  const int64_t total = static_cast<int64_t>(o.prompt.size()) + o.decode_tokens;
  int32_t next = o.prompt[0];
  for (int64_t step = 0; step < total; ++step) {
    if (step < static_cast<int64_t>(o.prompt.size())) next = o.prompt[step];
    const auto token = at::full({1}, next, at::kLong);
    const auto ref_logits = (*reference)->Step(token);
    const auto cand_logits = (*candidate)->Step(token);
    for (size_t layer = 0; layer < (*reference)->attention_outputs().size();
         ++layer) {
      const ErrorStats e = Compare((*candidate)->attention_outputs()[layer],
                                   (*reference)->attention_outputs()[layer]);
      Worst(&r.worst_layer, e);
      note_bad(step, static_cast<int64_t>(layer), e);
    }
    if (bf16) {
      exact32->Step(token);
      expanded16->Step(token);
      for (size_t layer = 0; layer < exact32->attention_outputs().size();
           ++layer) {
        const auto& truth = exact32->attention_outputs()[layer];
        r.storage_cos_dist = std::max(
            r.storage_cos_dist,
            Compare((*candidate)->attention_outputs()[layer], truth).cos_dist);
        r.expanded_storage_cos_dist = std::max(
            r.expanded_storage_cos_dist,
            Compare(expanded16->attention_outputs()[layer], truth).cos_dist);
      }
    }
    const ErrorStats e = Compare(cand_logits, ref_logits);
    Worst(&r.worst_logits, e);
    note_bad(step, -1, e);
    const auto ref_next =
        static_cast<int32_t>(ref_logits.argmax(-1).item<int64_t>());
    const auto cand_next =
        static_cast<int32_t>(cand_logits.argmax(-1).item<int64_t>());
    // Steps P-1 .. P+N-2 produce the N greedy tokens.
    const int64_t generated = step + 1 - static_cast<int64_t>(o.prompt.size());
    if (generated >= 0 && generated < o.decode_tokens) {
      ++r.decode_tokens;
      if (ref_next == cand_next) ++r.tokens_agreed;
    }
    next = ref_next;  // teacher-forced on the reference's greedy choice
    ++r.steps;
  }
  for (auto [engine, bytes] : {std::pair{candidate->get(), &r.candidate_cache},
                               {reference->get(), &r.reference_cache}}) {
    const CacheMeasurement m = engine->MeasureCache();
    *bytes = {m.used_bytes, m.allocated_bytes};
  }
  const bool tokens_ok = bf16 || r.tokens_agreed == r.decode_tokens;
  r.equivalent = r.first_bad_step < 0 && tokens_ok;
  return r;
}

}  // namespace lrkv
