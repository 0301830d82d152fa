// KV-cache and K/V-parameter accounting and the budget planner (see the
// header).
#include "surgery/cache_accounting.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

constexpr const char* kNames[] = {"mha", "gqa", "mqa", "mla", "lrkv"};

}  // namespace

const char* KvVariantName(KvVariant v) { return kNames[static_cast<int>(v)]; }

absl::StatusOr<KvVariant> ParseKvVariant(const std::string& name) {
  const std::string lower =
      absl::AsciiStrToLower(name);  // LRKV, Gqa: the same names
  for (int i = 0; i < 5; ++i) {
    if (lower == kNames[i]) return static_cast<KvVariant>(i);
  }
  return Invalid(absl::StrCat("unknown variant '", name,
                              "'; valid: mha, gqa, mqa, mla, lrkv"));
}

absl::Status AttentionShape::Validate() const {
  if (layers <= 0 || heads <= 0 || head_dim <= 0 || hidden < 0 ||
      kv_heads < 0) {
    return Invalid(
        absl::StrCat("layers, heads and head dim must be positive (got ",
                     layers, ", ", heads, ", ", head_dim, ")"));
  }
  if (heads % source_kv_heads() != 0) {
    return Invalid(absl::StrCat("kv heads (", source_kv_heads(),
                                ") must divide heads (", heads, ")"));
  }
  return absl::OkStatus();
}

KvConfig KvConfig::AtLayer(int64_t layer) const {
  KvConfig c = *this;
  c.layer_sizes.clear();
  if (!layer_sizes.empty()) {
    const int64_t size = layer_sizes[static_cast<size_t>(layer)];
    if (variant == KvVariant::kLrkv) c.rank = size;
    if (variant == KvVariant::kMla) c.latent = size;
  }
  return c;
}

std::string KvConfig::ToString() const {
  if (!layer_sizes.empty() &&
      (variant == KvVariant::kLrkv || variant == KvVariant::kMla)) {
    return absl::StrCat(variant == KvVariant::kLrkv ? "lrkv r=[" : "mla d_c=[",
                        absl::StrJoin(layer_sizes, ","), "]",
                        variant == KvVariant::kMla && rope_dim > 0
                            ? absl::StrCat(" d_rope=", rope_dim)
                            : "");
  }
  switch (variant) {
    case KvVariant::kMha:
      return "mha";
    case KvVariant::kGqa:
      return absl::StrCat("gqa n_kv=", kv_heads);
    case KvVariant::kMqa:
      return "mqa";
    case KvVariant::kMla:
      return rope_dim > 0
                 ? absl::StrCat("mla d_c=", latent, " d_rope=", rope_dim)
                 : absl::StrCat("mla d_c=", latent);
    case KvVariant::kLrkv:
      return absl::StrCat("lrkv r=", rank);
  }
  return "?";
}

int64_t SourceCacheElements(const AttentionShape& s) {
  return 2 * s.source_kv_heads() * s.head_dim;
}

int64_t CacheElementsAllLayers(const AttentionShape& s, const KvConfig& c) {
  if (c.layer_sizes.empty()) return s.layers * CacheElementsPerToken(s, c);
  int64_t total = 0;
  for (size_t l = 0; l < c.layer_sizes.size(); ++l) {
    total += CacheElementsPerToken(s, c.AtLayer(static_cast<int64_t>(l)));
  }
  return total;
}

int64_t CacheElementsPerToken(const AttentionShape& s, const KvConfig& c) {
  if (!c.layer_sizes.empty()) {
    return CacheElementsAllLayers(s, c) /
           static_cast<int64_t>(c.layer_sizes.size());
  }
  switch (c.variant) {
    case KvVariant::kMha:
      return 2 * s.heads * s.head_dim;
    case KvVariant::kGqa:
      return 2 * c.kv_heads * s.head_dim;
    case KvVariant::kMqa:
      return 2 * s.head_dim;
    case KvVariant::kMla:
      return c.latent + c.rope_dim;
    case KvVariant::kLrkv:
      if (s.qk_norm && s.qk_norm_over_heads) {
        return 2 * (s.head_dim + s.source_kv_heads() * c.rank) + s.head_dim + 1;
      }
      return 2 * (s.head_dim + s.source_kv_heads() * c.rank) +
             (s.qk_norm ? s.source_kv_heads() : 0);
  }
  return 0;
}

int64_t KvParameterCount(const AttentionShape& s, const KvConfig& c) {
  if (!c.layer_sizes.empty()) {
    int64_t total = 0;
    for (size_t l = 0; l < c.layer_sizes.size(); ++l) {
      total += KvParameterCount(s, c.AtLayer(static_cast<int64_t>(l)));
    }
    return total / static_cast<int64_t>(c.layer_sizes.size());
  }
  const int64_t d = s.d(), dh = s.head_dim, hkv = s.source_kv_heads();
  switch (c.variant) {
    case KvVariant::kMha:
      return 2 * s.heads * d * dh;
    case KvVariant::kGqa:
      return 2 * c.kv_heads * d * dh;
    case KvVariant::kMqa:
      return 2 * d * dh;
    case KvVariant::kMla:
      // Down-projection to the latent, up-projections to every KV head's K and
      // V, plus the decoupled RoPE key projection when present.
      return d * c.latent + c.latent * 2 * hkv * dh + d * c.rope_dim;
    case KvVariant::kLrkv:
      return 2 * d * dh + 2 * hkv * c.rank * (d + dh);
  }
  return 0;
}

CacheFootprint MeasureFootprint(const AttentionShape& s, const KvConfig& c,
                                int64_t context, int64_t batch,
                                int64_t bytes_per_element) {
  CacheFootprint f;
  f.config = c;
  f.elements_per_token_layer = CacheElementsPerToken(s, c);
  f.elements_per_token = CacheElementsAllLayers(s, c);
  const double per_layer = static_cast<double>(f.elements_per_token) / s.layers;
  f.bytes = static_cast<double>(bytes_per_element) * batch * context *
            f.elements_per_token;
  f.ratio_to_source = per_layer / SourceCacheElements(s);
  f.ratio_to_mha = per_layer / (2.0 * s.heads * s.head_dim);
  f.kv_params_per_layer = KvParameterCount(s, c);
  KvConfig source;
  source.variant =
      s.source_kv_heads() == s.heads ? KvVariant::kMha : KvVariant::kGqa;
  source.kv_heads = s.source_kv_heads();
  f.param_ratio_to_source =
      static_cast<double>(f.kv_params_per_layer) / KvParameterCount(s, source);
  return f;
}

absl::Status ValidateKvConfig(const AttentionShape& s, const KvConfig& c) {
  if (auto st = s.Validate(); !st.ok()) return st;
  const int64_t hkv = s.source_kv_heads();
  switch (c.variant) {
    case KvVariant::kMha:
    case KvVariant::kMqa:
      return absl::OkStatus();
    case KvVariant::kGqa:
      if (c.kv_heads < 1 || c.kv_heads > hkv || s.heads % c.kv_heads != 0) {
        return Invalid(absl::StrCat(
            "GQA kv heads n_kv=", c.kv_heads, " must divide the ", s.heads,
            " query heads and lie in [1, ", hkv, "] (the source's KV heads)"));
      }
      return absl::OkStatus();
    case KvVariant::kMla: {
      const int64_t max_latent = std::min(s.d(), 2 * hkv * s.head_dim);
      if (c.latent < 1 || c.latent > max_latent) {
        return Invalid(absl::StrCat("MLA latent d_c=", c.latent,
                                    " must lie in [1, ", max_latent,
                                    "] (min(d, 2*H_kv*d_h))"));
      }
      if (c.rope_dim < 0 || c.rope_dim > s.head_dim || c.rope_dim % 2 != 0) {
        return Invalid(absl::StrCat("MLA decoupled RoPE dims ", c.rope_dim,
                                    " must be even and in [0, ", s.head_dim,
                                    "]"));
      }
      return absl::OkStatus();
    }
    case KvVariant::kLrkv:
      if (c.rank < 0 || c.rank > s.head_dim) {
        return Invalid(absl::StrCat("LRKV rank r=", c.rank, " must lie in [0, ",
                                    s.head_dim, "] (the head dim d_h)"));
      }
      if (c.even_rank && c.rank % 2 != 0) {
        return Invalid(
            absl::StrCat("LRKV rank r=", c.rank,
                         " must be even in plane mode (r/2 rotation planes)"));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<KvConfig> PlanForBudget(const AttentionShape& s,
                                       KvVariant variant, double budget,
                                       bool even_rank, int64_t mla_rope_dim) {
  if (auto st = s.Validate(); !st.ok()) return st;
  if (!(budget > 0) || budget > 1 || std::isnan(budget)) {
    return Invalid(
        absl::StrCat("budget ", budget,
                     " must lie in (0, 1] (a fraction of the source cache)"));
  }
  const int64_t source = SourceCacheElements(s);
  // Small tolerance so that a budget printed with 4 digits still admits its
  // config.
  const double limit = budget * source * (1 + 1e-9);
  std::vector<KvConfig> candidates;  // smallest first
  KvConfig c;
  c.variant = variant;
  switch (variant) {
    case KvVariant::kMha:
      candidates.push_back(c);
      break;
    case KvVariant::kMqa:
      candidates.push_back(c);
      break;
    case KvVariant::kGqa:
      for (int64_t n = 1; n <= s.source_kv_heads(); ++n) {
        if (s.heads % n != 0) continue;
        c.kv_heads = n;
        candidates.push_back(c);
      }
      break;
    case KvVariant::kMla:
      c.rope_dim = mla_rope_dim;
      for (int64_t dc = 1;
           dc <= std::min(s.d(), 2 * s.source_kv_heads() * s.head_dim); ++dc) {
        c.latent = dc;
        candidates.push_back(c);
      }
      break;
    case KvVariant::kLrkv:
      c.even_rank = even_rank;
      for (int64_t r = 0; r <= s.head_dim; r += even_rank ? 2 : 1) {
        c.rank = r;
        candidates.push_back(c);
      }
      break;
  }
  const KvConfig* best = nullptr;
  for (const auto& cand : candidates) {
    if (CacheElementsPerToken(s, cand) <= limit) best = &cand;
  }
  if (best == nullptr) {
    const double min_budget =
        static_cast<double>(CacheElementsPerToken(s, candidates.front())) /
        source;
    return Invalid(
        absl::StrFormat("budget %.4f is too small for %s: its smallest "
                        "configuration (%s) needs %.4f "
                        "of the source cache; valid budgets are [%.4f, 1]",
                        budget, KvVariantName(variant),
                        candidates.front().ToString(), min_budget, min_budget));
  }
  return *best;
}

absl::StatusOr<std::vector<CacheFootprint>> CompareCacheFootprints(
    const AttentionShape& s, const CacheQuery& q) {
  if (auto st = s.Validate(); !st.ok()) return st;
  const int given = (q.rank >= 0) + (q.latent >= 0) + (q.budget > 0);
  if (given != 1) {
    return Invalid("give exactly one of --rank, --latent or --budget");
  }
  if (q.context < 1 || q.batch < 1 || q.bytes_per_element < 1) {
    return Invalid("context, batch and element size must be positive");
  }
  std::vector<KvConfig> configs;
  KvConfig mha;
  configs.push_back(mha);
  if (q.budget > 0) {
    for (KvVariant v : {KvVariant::kGqa, KvVariant::kMqa, KvVariant::kMla,
                        KvVariant::kLrkv}) {
      // LRKV: an even r, what convert's default RoPE mode (plane) can take.
      auto planned = PlanForBudget(s, v, q.budget, v == KvVariant::kLrkv);
      if (planned.ok()) configs.push_back(*planned);
    }
    if (configs.size() == 1) {
      return Invalid(absl::StrCat("budget ", q.budget, " fits no variant"));
    }
  } else {
    if (s.source_kv_heads() < s.heads) {
      KvConfig gqa;
      gqa.variant = KvVariant::kGqa;
      gqa.kv_heads = s.source_kv_heads();
      configs.push_back(gqa);
    }
    KvConfig mqa;
    mqa.variant = KvVariant::kMqa;
    configs.push_back(mqa);
    KvConfig lrkv, mla;
    lrkv.variant = KvVariant::kLrkv;
    mla.variant = KvVariant::kMla;
    if (q.rank >= 0) {
      lrkv.rank = q.rank;
      if (auto st = ValidateKvConfig(s, lrkv); !st.ok()) return st;
      mla.latent =
          std::min(CacheElementsPerToken(s, lrkv),
                   std::min(s.d(), 2 * s.source_kv_heads() * s.head_dim));
    } else {
      mla.latent = q.latent;
      if (auto st = ValidateKvConfig(s, mla); !st.ok()) return st;
      lrkv.rank = -1;
      for (int64_t r = 0; r <= s.head_dim; ++r) {
        KvConfig c = lrkv;
        c.rank = r;
        if (CacheElementsPerToken(s, c) <= q.latent) lrkv.rank = r;
      }
    }
    configs.push_back(mla);
    if (lrkv.rank >= 0) configs.push_back(lrkv);
  }
  std::vector<CacheFootprint> rows;
  for (const auto& c : configs) {
    rows.push_back(
        MeasureFootprint(s, c, q.context, q.batch, q.bytes_per_element));
  }
  return rows;
}

}  // namespace lrkv
