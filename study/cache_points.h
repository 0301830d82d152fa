// The study at equal bytes: the source and every row's final checkpoint scored
// on the held-out text through its serving engine's KV cache in each storage
// of --cache-dtype (bf16, f32, ggml's Q8_0 / Q4_0), each point at the bytes a
// token's cache takes there, with the Pareto front of perplexity against bytes
// and, for byte budgets of the source's bf16 cache, the best point within each.
#ifndef LRKV_STUDY_CACHE_POINTS_H_
#define LRKV_STUDY_CACHE_POINTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/decode_params.h"
#include "nlohmann/json.hpp"

namespace lrkv {

struct CachePoint {
  std::string label;  // "source", or the row's config and RoPE mode
  std::string cache;  // kernels::CacheDTypeName
  // Every layer's cached values for one token at this storage's bits (the
  // block scales included), and that over the source's bf16 cache.
  double bytes_per_token = 0, bytes_fraction = 0;
  double perplexity = 0;
  // No other point has at most these bytes and a lower perplexity.
  bool pareto = false;
};

// Scores `checkpoint` on `docs` through its serving engine's cache in storage
// `cache`; `source_bf16_bytes` is the source's bf16 bytes per token.
absl::StatusOr<CachePoint> MeasureCachePoint(const std::string& checkpoint,
                                             const std::string& label,
                                             kernels::CacheDType cache,
                                             const std::vector<std::string>& docs,
                                             double source_bf16_bytes);

// The source's bf16 cache bytes per token (every layer's K and V).
absl::StatusOr<double> SourceBf16BytesPerToken(const std::string& checkpoint);

// Sets `pareto` on every point.
void MarkParetoFront(std::vector<CachePoint>* points);

// The byte budgets the summary judges (fractions of the source's bf16 cache).
inline constexpr double kCacheByteBudgets[] = {0.5, 0.25, 0.125};

// One line per budget: the best point within it and by how much it beats (or
// trails) the source's best point within it; said plainly when the source's own
// quantized cache wins, or when nothing fits.
std::vector<std::string> SummarizeByteBudgets(
    const std::vector<CachePoint>& points);

nlohmann::json CachePointsJson(const std::vector<CachePoint>& points);
// The reverse (throws nlohmann::json::exception on a malformed array).
std::vector<CachePoint> CachePointsFromJson(const nlohmann::json& j);
// A markdown table of the points, fewest bytes first.
std::string CachePointsTable(const std::vector<CachePoint>& points);

}  // namespace lrkv

#endif  // LRKV_STUDY_CACHE_POINTS_H_
