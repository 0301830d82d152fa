// The results of verification — equivalence per decode mode, cache
// measurements, fidelity to the source, head diversity — as plain data (no
// LibTorch), with JSON, JUnit XML and table renderings.
#ifndef LRKV_VERIFY_VERIFY_REPORT_H_
#define LRKV_VERIFY_VERIFY_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
  std::string dtype;                // "fp32" | "bf16": the candidate's cache storage
  // False for the naive control under "all" (it must come out NOT EQUIVALENT);
  // true for every exact mode, and for naive asked for by name.
  bool expected_equivalent = true;
  // The error model (verify/equivalence.h, README "Verification"): at each
  // comparison site — every layer's attention output, and the logits — the
  // candidate's RMS error over the run against the expanded engine in float64
  // must stay within 2·max(the plain expanded engine's in the candidate's
  // storage dtype, the rounding of the candidate's own algorithm in fp32) +
  // atol. `rule` says it in words; `reference` and `plain` name the engines.
  std::string rule;
  std::string reference;
  std::string plain;
  // The candidate's cache layout: "rows", or "tiles" (plane mode read by the
  // fused tiled kernel's layout, kernels/decode_params.h).
  std::string cache_layout;
  // At the site with the highest ratio, RMS errors relative to the RMS of the
  // f64 values there:
  int64_t worst_site = -1;      // layer index, or -1 for the logits
  double candidate_error = 0;   // candidate − f64
  double reference_error = 0;   // max(plain − f64, own rounding)
  double bound = 0;             // 2·reference_error + atol
  double ratio = 0;             // candidate_error / bound: ≤ 1 passes
  // A NaN or Inf in any candidate, plain or f64 output (a failure; the first
  // step/layer where it appeared is first_bad_*).
  bool non_finite = false;
  bool equivalent = false;
  ErrorStats worst_layer;  // candidate vs f64, over steps and layers (each statistic's max)
  ErrorStats worst_logits;
  int64_t steps = 0;
  int64_t decode_tokens = 0;
  // Greedy steps where the candidate's argmax agreed with the f64 engine's, and
  // those where it did not but f64's top-two margin lay within the logits bound
  // (a tie at rounding level, not a failure).
  int64_t tokens_agreed = 0;
  int64_t tokens_tied = 0;
  // The first step/layer where the candidate's RMS error so far exceeded the
  // bound of a site that fails, or a value was not finite (-1: none; layer -1:
  // logits), and that error (relative).
  int64_t first_bad_step = -1;
  int64_t first_bad_layer = -1;
  double first_bad_error = 0;
  // Cache bytes the candidate and the plain expanded engine hold for their
  // `steps` positions at the end of the run.
  CacheBytes candidate_cache, reference_cache;
  // Asked for by name: then a mode that does not apply fails the check; with
  // "all", inapplicable modes are only reported.
  bool required = false;
  // The check passes when the verdict matches the expectation.
  bool passed() const {
    return applicable ? equivalent == expected_equivalent : !required;
  }
};

// `s` escaped for an XML attribute or text (the JUnit writers).
std::string XmlEscape(const std::string& s);

// EQUIVALENT / NOT EQUIVALENT / n/a; the naive control under "all" reads
// "expected NOT EQUIVALENT: confirmed" (or "...: it was EQUIVALENT").
std::string EquivalenceVerdict(const EquivalenceResult& e);
// One line: the verdict, the measured error, the bound, the ratio, the greedy
// tokens, the first divergence and the rule.
std::string DescribeEquivalence(const EquivalenceResult& e);

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

// A quality gate on fidelity (verify --max-ppl-increase, --min-top1, --max-kl): the
// measured figure against the bound the user set. NaN measured: fidelity was not
// measured, which fails the gate.
struct QualityGate {
  std::string option;   // "max_ppl_increase" | "min_top1" | "max_kl"
  std::string measure;  // what `measured` is, in words
  double measured = 0;
  double bound = 0;
  bool at_most = true;  // measured <= bound passes; else measured >= bound
  bool passed() const { return at_most ? measured <= bound : measured >= bound; }
};

// "relative perplexity increase 0.0312 <= 0.05: pass".
std::string DescribeGate(const QualityGate& g);

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
  // Why fidelity was not measured although a source was given (no --text, a text that
  // selects no document, a checkpoint without a tokenizer); empty otherwise.
  std::string fidelity_skipped;
  std::optional<DiversityResult> diversity;
  std::vector<QualityGate> gates;

  // Every applicable equivalence check, every cache check and every gate passed.
  bool passed() const;
  nlohmann::json ToJson() const;
  std::string ToJUnit() const;
  std::string ToTable() const;
};

// Reads back VerifyReport::ToJson() (a verify job's report from lrkvd, a pipeline's
// "verify" section), so that a remote verify prints the same table and JUnit as a local
// one. InvalidArgument naming what is missing.
absl::StatusOr<VerifyReport> VerifyReportFromJson(const nlohmann::json& json);

}  // namespace lrkv

#endif  // LRKV_VERIFY_VERIFY_REPORT_H_
