// The study at equal bytes (see cache_points.h).
#include "study/cache_points.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "runtime/cache_dtype.h"
#include "runtime/language_model.h"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"
#include "surgery/kv_variant.h"

namespace lrkv {
namespace {

// Cached values per token, every layer, of a checkpoint's own scheme.
absl::StatusOr<int64_t> CacheElementsPerToken(const std::string& checkpoint) {
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(checkpoint));
  const ModelConfig& c = ckpt->config();
  return CacheElementsAllLayers(ShapeOf(c), KvConfigOf(c));
}

std::string Percent(double x) { return absl::StrFormat("%+.2f%%", 100 * x); }

}  // namespace

absl::StatusOr<double> SourceBf16BytesPerToken(const std::string& checkpoint) {
  ASSIGN_OR_RETURN(const int64_t elements, CacheElementsPerToken(checkpoint));
  return 2.0 * static_cast<double>(elements);
}

absl::StatusOr<CachePoint> MeasureCachePoint(
    const std::string& checkpoint, const std::string& label,
    kernels::CacheDType cache, const std::vector<std::string>& docs,
    double source_bf16_bytes) {
  ASSIGN_OR_RETURN(const int64_t elements, CacheElementsPerToken(checkpoint));
  const CacheDtype storage = CacheDtypeOf(cache);
  ASSIGN_OR_RETURN(auto model, LanguageModel::Load(checkpoint));
  ASSIGN_OR_RETURN(PerplexityResult r,
                   model->Perplexity(docs, {}, storage.name));
  CachePoint p;
  p.label = label;
  p.cache = storage.name;
  p.bytes_per_token = static_cast<double>(elements) * storage.bits() / 8;
  p.bytes_fraction = p.bytes_per_token / source_bf16_bytes;
  p.perplexity = r.perplexity;
  return p;
}

void MarkParetoFront(std::vector<CachePoint>* points) {
  for (CachePoint& p : *points) {
    p.pareto = std::none_of(
        points->begin(), points->end(), [&](const CachePoint& q) {
          return &q != &p && q.bytes_per_token <= p.bytes_per_token &&
                 q.perplexity < p.perplexity;
        });
  }
}

std::vector<std::string> SummarizeByteBudgets(
    const std::vector<CachePoint>& points) {
  std::vector<std::string> lines;
  for (double budget : kCacheByteBudgets) {
    const CachePoint *best = nullptr, *source = nullptr, *stacked = nullptr;
    for (const CachePoint& p : points) {
      if (p.bytes_fraction > budget * (1 + 1e-9)) continue;
      auto better = [&](const CachePoint* b) {
        return b == nullptr || p.perplexity < b->perplexity;
      };
      if (better(best)) best = &p;
      if (p.label == "source" && better(source)) source = &p;
      if (p.label != "source" && better(stacked)) stacked = &p;
    }
    std::string line = absl::StrFormat("at <= %.1f%% of the source's bf16 cache: ",
                                       100 * budget);
    if (best == nullptr) {
      lines.push_back(line + "no entry fits");
      continue;
    }
    absl::StrAppendFormat(&line, "best %s %s (%.1f%%, perplexity %.4f)",
                          best->label, best->cache, 100 * best->bytes_fraction,
                          best->perplexity);
    if (best->label == "source") {
      absl::StrAppend(&line, " -- the source's own quantized cache wins");
      if (stacked != nullptr) {
        absl::StrAppendFormat(
            &line, "; the best conversion there, %s %s, is %s worse",
            stacked->label, stacked->cache,
            Percent(stacked->perplexity / best->perplexity - 1));
      }
    } else if (source != nullptr) {
      absl::StrAppendFormat(&line, ", %s against the source's best there (%s, "
                                   "perplexity %.4f)",
                            Percent(best->perplexity / source->perplexity - 1),
                            source->cache, source->perplexity);
    } else {
      absl::StrAppend(&line, "; no cache of the source fits this budget");
    }
    lines.push_back(line);
  }
  return lines;
}

nlohmann::json CachePointsJson(const std::vector<CachePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const CachePoint& p : points) {
    out.push_back({{"label", p.label},
                   {"cache_dtype", p.cache},
                   {"bytes_per_token", p.bytes_per_token},
                   {"bytes_fraction", p.bytes_fraction},
                   {"perplexity", p.perplexity},
                   {"pareto", p.pareto}});
  }
  return out;
}

std::vector<CachePoint> CachePointsFromJson(const nlohmann::json& j) {
  std::vector<CachePoint> points;
  for (const auto& x : j) {
    CachePoint p;
    p.label = x.at("label").get<std::string>();
    p.cache = x.at("cache_dtype").get<std::string>();
    p.bytes_per_token = x.at("bytes_per_token").get<double>();
    p.bytes_fraction = x.at("bytes_fraction").get<double>();
    p.perplexity = x.at("perplexity").get<double>();
    p.pareto = x.at("pareto").get<bool>();
    points.push_back(p);
  }
  return points;
}

std::string CachePointsTable(const std::vector<CachePoint>& points) {
  std::vector<const CachePoint*> sorted;
  for (const CachePoint& p : points) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const CachePoint* a, const CachePoint* b) {
                     return a->bytes_per_token < b->bytes_per_token;
                   });
  std::string out =
      "| entry | cache | bytes/token | of source bf16 | perplexity | Pareto |\n"
      "|---|---|---:|---:|---:|:---:|\n";
  for (const CachePoint* p : sorted) {
    absl::StrAppendFormat(&out, "| %s | %s | %.1f | %.1f%% | %.4f | %s |\n",
                          p->label, p->cache, p->bytes_per_token,
                          100 * p->bytes_fraction, p->perplexity,
                          p->pareto ? "*" : "");
  }
  return out;
}

}  // namespace lrkv
