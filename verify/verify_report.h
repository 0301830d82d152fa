// The results of verification — equivalence per decode mode, cache
// measurements, fidelity to the source, head diversity — as plain data (no
// LibTorch), with JSON, JUnit XML and table renderings.
#ifndef LRKV_VERIFY_VERIFY_REPORT_H_
#define LRKV_VERIFY_VERIFY_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace lrkv {

struct ErrorStats {
  double max_abs = 0;
  double max_rel = 0;   // max|Δ| / max|ref|
  double cos_dist = 0;  // 1 − cos(candidate, reference), flattened
};

// An engine's cache after a run (see DecodeEngine::MeasureCache).
struct CacheBytes {
  int64_t used = 0;       // the part holding the decoded positions
  int64_t allocated = 0;  // Σ numel × element size
};

struct EquivalenceResult {
  std::string mode;
  bool applicable = true;
  std::string reason;               // why not applicable
  std::string dtype;                // "fp32" | "bf16"
  bool expected_equivalent = true;  // false for the naive control
  // What the candidate was compared with: the expanded engine (fp32, and the
  // naive control), or the same stored bf16 cache decoded through materialised
  // K/V (bf16).
  std::string reference;
  // The candidate's cache layout: "rows", or "tiles" (plane mode read by the
  // fused tiled kernel's layout, kernels/decode_params.h).
  std::string cache_layout;
  // bf16 only, for information: worst per-layer cosine distance of the
  // candidate, and of an expanded engine with a bf16 cache, from the fp32
  // expanded engine. This is the cost of storing that cache in bf16, not a
  // property of the decode algorithm.
  double storage_cos_dist = 0;
  double expanded_storage_cos_dist = 0;
  bool equivalent = false;
  ErrorStats worst_layer;  // over steps and layers (each statistic's max)
  ErrorStats worst_logits;
  int64_t steps = 0;
  int64_t decode_tokens = 0;
  int64_t tokens_agreed =
      0;  // greedy steps where the candidate's argmax agreed
  // The first step/layer where the tolerance was exceeded (-1: none; layer -1:
  // logits).
  int64_t first_bad_step = -1;
  int64_t first_bad_layer = -1;
  double first_bad_error = 0;
  // Cache bytes both engines hold for their `steps` positions at the end of the
  // run (the reference is the expanded engine except in the bf16 materialised
  // check).
  CacheBytes candidate_cache, reference_cache;
  // Asked for by name: then a mode that does not apply fails the check; with
  // "all", inapplicable modes are only reported.
  bool required = false;
  // The check passes when the verdict matches the expectation (naive must
  // fail).
  bool passed() const {
    return applicable ? equivalent == expected_equivalent : !required;
  }
};

struct CacheCheck {
  std::string engine;   // "expanded" | mode name
  std::string variant;  // accounting config, e.g. "lrkv r=2"
  int64_t tokens = 0;
  int64_t allocated_bytes = 0;
  int64_t used_bytes = 0;
  int64_t formula_bytes = 0;
  bool passed() const { return used_bytes == formula_bytes; }
};

struct FidelityResult {
  int64_t documents = 0;
  int64_t tokens = 0;
  double kl_mean = 0;  // mean over positions of KL(source ‖ converted), nats
  double kl_max = 0;
  double top1_agreement = 0;
  double source_perplexity = 0;
  double converted_perplexity = 0;
};

struct DiversityResult {
  int64_t heads = 0;
  // Entropy effective rank of the centred / uncentred Gram matrix of the
  // per-head bilinear forms A_h = W_hQ W_hKᵀ, averaged over layers; bound H − 1
  // (centred).
  double source_centred = 0, source_uncentred = 0;
  double converted_centred = 0, converted_uncentred = 0;
  bool has_source = false;
};

struct VerifyReport {
  std::string checkpoint;
  std::string source;
  std::string variant;  // accounting config of the checkpoint
  std::vector<EquivalenceResult> equivalence;
  std::vector<CacheCheck> cache;
  std::optional<FidelityResult> fidelity;
  std::optional<DiversityResult> diversity;

  // Every applicable equivalence check and every cache check passed.
  bool passed() const;
  nlohmann::json ToJson() const;
  std::string ToJUnit() const;
  std::string ToTable() const;
};

}  // namespace lrkv

#endif  // LRKV_VERIFY_VERIFY_REPORT_H_
