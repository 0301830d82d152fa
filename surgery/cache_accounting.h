// KV-cache and K/V-parameter accounting for every attention variant
// (docs/design.md, "The math that must hold"), and the budget planner that
// picks each variant's largest configuration within a cache budget
// (docs/design.md, "Surgery"). No LibTorch: the service and CLI use it
// directly.
#ifndef LRKV_SURGERY_CACHE_ACCOUNTING_H_
#define LRKV_SURGERY_CACHE_ACCOUNTING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

enum class KvVariant { kMha, kGqa, kMqa, kMla, kLrkv };

const char* KvVariantName(KvVariant v);
// "mha", "gqa", "mqa", "mla", "lrkv"; InvalidArgument listing the valid names.
absl::StatusOr<KvVariant> ParseKvVariant(const std::string& name);

// The attention shape of the source model.
struct AttentionShape {
  int64_t layers = 1;
  int64_t hidden = 0;    // d; 0 means H * d_h
  int64_t heads = 0;     // H (query heads)
  int64_t kv_heads = 0;  // H_kv of the source; 0 means H (MHA)
  int64_t head_dim = 0;  // d_h
  bool qk_norm = false;  // per-head QK-norm: LRKV caches one scale per KV head
  // OLMo-2's QK-norm over the whole projection: one scale per token, and (its weights
  // differing per head) a second rotated shared key, P_t J k_s (lrkv_engine.cc).
  bool qk_norm_over_heads = false;

  int64_t d() const { return hidden > 0 ? hidden : heads * head_dim; }
  int64_t source_kv_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  absl::Status Validate() const;
};

// One configuration of one variant.
struct KvConfig {
  KvVariant variant = KvVariant::kMha;
  int64_t kv_heads = 0;  // GQA: number of KV heads
  int64_t latent = 0;    // MLA: d_c
  int64_t rope_dim = 0;  // MLA: decoupled RoPE dims cached beside the latent
  int64_t rank = 0;      // LRKV: r
  // LRKV plane mode needs an even rank (r/2 rotation planes).
  bool even_rank = false;
  // A budget allocated across layers (LRKV: rank, MLA: latent, per layer); `rank` /
  // `latent` then hold the largest. Empty: uniform.
  std::vector<int64_t> layer_sizes;

  // This configuration as layer `layer` has it (uniform).
  KvConfig AtLayer(int64_t layer) const;
  // "lrkv r=51", "gqa n_kv=4", "mla d_c=512", "lrkv r=[4,2,2,0]" (per layer)
  std::string ToString() const;
};

// Elements cached per token per layer (docs/design.md, "The math that must
// hold"); LRKV counts the QK-norm scales when shape.qk_norm. Per-layer sizes:
// the mean over the layers, rounded down (see CacheElementsAllLayers for the
// exact total).
int64_t CacheElementsPerToken(const AttentionShape& shape, const KvConfig& config);
// Elements cached per token by all shape.layers layers.
int64_t CacheElementsAllLayers(const AttentionShape& shape, const KvConfig& config);
// Elements of the source model's own cache (2 * H_kv * d_h).
int64_t SourceCacheElements(const AttentionShape& shape);
// K/V projection parameters per layer (weights only).
int64_t KvParameterCount(const AttentionShape& shape, const KvConfig& config);

struct CacheFootprint {
  KvConfig config;
  int64_t elements_per_token_layer = 0;  // the mean over layers when sizes differ
  int64_t elements_per_token = 0;        // all layers
  double bytes = 0;            // s * N * b * L * elements
  double ratio_to_source = 0;  // elements / source elements
  double ratio_to_mha = 0;     // elements / (2 * H * d_h)
  int64_t kv_params_per_layer = 0;  // the mean over layers when sizes differ
  double param_ratio_to_source = 0;
};

CacheFootprint MeasureFootprint(const AttentionShape& shape, const KvConfig& config,
                                int64_t context, int64_t batch, int64_t bytes_per_element);

// Checks that `config` is possible for `shape` (ranks, divisibility); InvalidArgument
// naming the valid range otherwise.
absl::Status ValidateKvConfig(const AttentionShape& shape, const KvConfig& config);

// The largest configuration of base's variant (its even_rank and rope_dim
// kept) whose cache is at most `budget` times the source cache.
// InvalidArgument, with the smallest budget that variant can meet, when none
// fits.
absl::StatusOr<KvConfig> PlanForBudget(const AttentionShape& shape,
                                       const KvConfig& base, double budget);
// The same, from a base of `variant` with `even_rank` and `mla_rope_dim`.
absl::StatusOr<KvConfig> PlanForBudget(const AttentionShape& shape, KvVariant variant,
                                       double budget, bool even_rank = false,
                                       int64_t mla_rope_dim = 0);

// The LRKV rank of `shape`: `rank` when given (InvalidArgument above d_h),
// else the largest within `budget` of the source cache (0.5 when unset too).
// `lrkv bench decode` and lrkvd's bench jobs alike.
absl::StatusOr<int64_t> LrkvRankFor(const AttentionShape& shape,
                                    std::optional<int64_t> rank,
                                    std::optional<double> budget);

// What `lrkv cache` compares: one explicit size (rank, latent) or a budget.
struct CacheQuery {
  int64_t rank = -1;    // LRKV r; MLA is then matched to LRKV's cache
  int64_t latent = -1;  // MLA d_c; LRKV is then the largest r within it
  double budget = 0;    // > 0: every variant's largest config within budget x source
                        // (LRKV: the largest even r, as convert's default plane mode)
  int64_t context = 1;
  int64_t batch = 1;
  int64_t bytes_per_element = 2;
};

// One row per variant (MHA, GQA when the source is GQA or a budget is given, MQA,
// MLA, LRKV), with bytes for the query's context, batch and element size.
absl::StatusOr<std::vector<CacheFootprint>> CompareCacheFootprints(
    const AttentionShape& shape, const CacheQuery& query);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CACHE_ACCOUNTING_H_
