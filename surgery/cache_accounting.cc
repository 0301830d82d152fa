// KV-cache and K/V-parameter accounting and the budget planner (see the
// header).
#include "surgery/cache_accounting.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "surgery/kv_variant.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

const KvVariantType& TypeOf(const KvConfig& c) {
  return KvVariantTypeOf(c.variant);
}

}  // namespace

const char* KvVariantName(KvVariant v) { return KvVariantTypeOf(v).name(); }

absl::StatusOr<KvVariant> ParseKvVariant(const std::string& name) {
  const std::string lower =
      absl::AsciiStrToLower(name);  // LRKV, Gqa: the same names
  std::vector<std::string> names;
  for (const KvVariantType* t : AllKvVariantTypes()) {
    if (lower == t->name()) return t->id();
    names.push_back(t->name());
  }
  return Invalid(absl::StrCat("unknown variant '", name,
                              "'; valid: ", absl::StrJoin(names, ", ")));
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
  if (!layer_sizes.empty() && TypeOf(c).allocatable()) {
    *TypeOf(c).SizeField(&c) = layer_sizes[static_cast<size_t>(layer)];
  }
  return c;
}

std::string KvConfig::ToString() const {
  const KvVariantType& type = TypeOf(*this);
  std::string out = type.name();
  KvConfig copy = *this;
  if (const int64_t* size = type.SizeField(&copy); size != nullptr) {
    const bool per_layer = !layer_sizes.empty() && type.allocatable();
    absl::StrAppend(
        &out, " ", type.size_label(), "=",
        per_layer ? absl::StrCat("[", absl::StrJoin(layer_sizes, ","), "]")
                  : absl::StrCat(*size));
  }
  return out + type.DescribeExtra(*this);
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
  return TypeOf(c).CacheElements(s, c);
}

int64_t KvParameterCount(const AttentionShape& s, const KvConfig& c) {
  if (!c.layer_sizes.empty()) {
    int64_t total = 0;
    for (size_t l = 0; l < c.layer_sizes.size(); ++l) {
      total += KvParameterCount(s, c.AtLayer(static_cast<int64_t>(l)));
    }
    return total / static_cast<int64_t>(c.layer_sizes.size());
  }
  return TypeOf(c).Parameters(s, c);
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
  // The source: dense K/V with its own KV heads (its cost is the same under
  // either dense name).
  KvConfig source;
  source.variant = KvVariant::kGqa;
  source.kv_heads = s.source_kv_heads();
  f.param_ratio_to_source =
      static_cast<double>(f.kv_params_per_layer) / KvParameterCount(s, source);
  return f;
}

absl::Status ValidateKvConfig(const AttentionShape& s, const KvConfig& c) {
  if (auto st = s.Validate(); !st.ok()) return st;
  return TypeOf(c).Validate(s, c);
}

absl::StatusOr<KvConfig> PlanForBudget(const AttentionShape& s,
                                       const KvConfig& base, double budget) {
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
  const std::vector<KvConfig> candidates =
      TypeOf(base).BudgetCandidates(s, base);  // smallest first
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
                        budget, TypeOf(base).name(),
                        candidates.front().ToString(), min_budget, min_budget));
  }
  return *best;
}

absl::StatusOr<KvConfig> PlanForBudget(const AttentionShape& s,
                                       KvVariant variant, double budget,
                                       bool even_rank, int64_t mla_rope_dim) {
  KvConfig base;
  base.variant = variant;
  base.even_rank = even_rank;
  base.rope_dim = mla_rope_dim;
  return PlanForBudget(s, base, budget);
}

absl::StatusOr<int64_t> LrkvRankFor(const AttentionShape& shape,
                                    std::optional<int64_t> rank,
                                    std::optional<double> budget) {
  if (rank) {
    if (*rank < 0 || *rank > shape.head_dim) {
      return Invalid(absl::StrCat("rank ", *rank, " must lie in [0, ",
                                  shape.head_dim, "] (the head dimension)"));
    }
    return *rank;
  }
  KvConfig base;
  base.variant = KvVariant::kLrkv;
  ASSIGN_OR_RETURN(KvConfig planned,
                   PlanForBudget(shape, base, budget.value_or(0.5)));
  return planned.rank;
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
    for (const KvVariantType* t : AllKvVariantTypes()) {
      if (!t->convertible()) continue;
      // LRKV: an even r, what convert's default RoPE mode (plane) can take.
      auto planned = PlanForBudget(s, t->DefaultBudgetBase(), q.budget);
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
