// The dense variants: the source's own heads (mha), pooled into fewer KV heads
// (gqa) or into one (mqa). A converted model of these is a plain dense
// checkpoint; their RoPE stays exact.
#include <memory>

#include "absl/strings/str_cat.h"
#include "surgery/variants/variant_types.h"

namespace lrkv {
namespace {

// Dense K/V: a converted model's accounting config is its KV heads.
class DenseVariant : public KvVariantType {
 public:
  KvConfig FromModel(const ModelConfig& c) const override {
    KvConfig kv;
    kv.variant = id();
    kv.kv_heads = c.num_kv_heads;
    return kv;
  }
};

class Mha : public DenseVariant {
 public:
  KvVariant id() const override { return KvVariant::kMha; }
  const char* name() const override { return "mha"; }
  int64_t CacheElements(const AttentionShape& s,
                        const KvConfig&) const override {
    return 2 * s.heads * s.head_dim;
  }
  int64_t Parameters(const AttentionShape& s, const KvConfig&) const override {
    return 2 * s.heads * s.d() * s.head_dim;
  }
  bool convertible() const override { return false; }
  bool Describes(const ModelConfig& c) const override {
    return !c.kv.Factored() && c.num_kv_heads == c.num_heads;
  }
};

class Gqa : public DenseVariant {
 public:
  KvVariant id() const override { return KvVariant::kGqa; }
  const char* name() const override { return "gqa"; }
  const char* size_label() const override { return "n_kv"; }
  int64_t* SizeField(KvConfig* c) const override { return &c->kv_heads; }
  int64_t CacheElements(const AttentionShape& s,
                        const KvConfig& c) const override {
    return 2 * c.kv_heads * s.head_dim;
  }
  int64_t Parameters(const AttentionShape& s,
                     const KvConfig& c) const override {
    return 2 * c.kv_heads * s.d() * s.head_dim;
  }
  absl::Status Validate(const AttentionShape& s,
                        const KvConfig& c) const override {
    const int64_t hkv = s.source_kv_heads();
    if (c.kv_heads < 1 || c.kv_heads > hkv || s.heads % c.kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GQA kv heads n_kv=", c.kv_heads, " must divide the ", s.heads,
          " query heads and lie in [1, ", hkv, "] (the source's KV heads)"));
    }
    return absl::OkStatus();
  }
  std::vector<KvConfig> BudgetCandidates(const AttentionShape& s,
                                         const KvConfig& base) const override {
    std::vector<KvConfig> out;
    for (int64_t n = 1; n <= s.source_kv_heads(); ++n) {
      if (s.heads % n != 0) continue;
      out.push_back(base);
      out.back().kv_heads = n;
    }
    return out;
  }
  bool pooled() const override { return true; }
  int64_t PooledKvHeads(const KvConfig& c) const override { return c.kv_heads; }
  absl::Status SetExplicitSize(const ConversionOptions& o,
                               KvConfig* target) const override {
    if (o.kv_heads < 0) {
      return absl::InvalidArgumentError("gqa needs --kv-heads n or --budget");
    }
    target->kv_heads = o.kv_heads;
    return absl::OkStatus();
  }
  bool Describes(const ModelConfig& c) const override {
    return !c.kv.Factored() && c.num_kv_heads != c.num_heads &&
           c.num_kv_heads != 1;
  }
};

class Mqa : public DenseVariant {
 public:
  KvVariant id() const override { return KvVariant::kMqa; }
  const char* name() const override { return "mqa"; }
  int64_t CacheElements(const AttentionShape& s,
                        const KvConfig&) const override {
    return 2 * s.head_dim;
  }
  int64_t Parameters(const AttentionShape& s, const KvConfig&) const override {
    return 2 * s.d() * s.head_dim;
  }
  bool pooled() const override { return true; }
  int64_t PooledKvHeads(const KvConfig&) const override { return 1; }
  bool Describes(const ModelConfig& c) const override {
    return !c.kv.Factored() && c.num_kv_heads == 1 && c.num_heads != 1;
  }
};

}  // namespace

std::unique_ptr<KvVariantType> MakeMhaVariant() {
  return std::make_unique<Mha>();
}
std::unique_ptr<KvVariantType> MakeGqaVariant() {
  return std::make_unique<Gqa>();
}
std::unique_ptr<KvVariantType> MakeMqaVariant() {
  return std::make_unique<Mqa>();
}

}  // namespace lrkv
