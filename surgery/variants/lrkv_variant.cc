// LRKV: per KV head, a shared key/value of d_h elements plus H_kv residual
// latents of r elements each, for K and for V; with QK-norm also the scales
// (one per KV head, or one per token and a second rotated shared key for
// QK-norm over all heads). Every RoPE mode applies (formats/config.h).
#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "surgery/variants/variant_types.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

class Lrkv : public KvVariantType {
 public:
  KvVariant id() const override { return KvVariant::kLrkv; }
  const char* name() const override { return "lrkv"; }
  const char* size_label() const override { return "r"; }
  int64_t* SizeField(KvConfig* c) const override { return &c->rank; }
  bool allocatable() const override { return true; }

  int64_t CacheElements(const AttentionShape& s,
                        const KvConfig& c) const override {
    const int64_t hkv = s.source_kv_heads();
    if (s.qk_norm && s.qk_norm_over_heads) {
      return 2 * (s.head_dim + hkv * c.rank) + s.head_dim + 1;
    }
    return 2 * (s.head_dim + hkv * c.rank) + (s.qk_norm ? hkv : 0);
  }
  int64_t Parameters(const AttentionShape& s,
                     const KvConfig& c) const override {
    const int64_t d = s.d(), dh = s.head_dim;
    return 2 * d * dh + 2 * s.source_kv_heads() * c.rank * (d + dh);
  }
  absl::Status Validate(const AttentionShape& s,
                        const KvConfig& c) const override {
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
  std::vector<KvConfig> BudgetCandidates(const AttentionShape& s,
                                         const KvConfig& base) const override {
    std::vector<KvConfig> out;
    for (int64_t r = 0; r <= s.head_dim; r += base.even_rank ? 2 : 1) {
      out.push_back(base);
      out.back().rank = r;
    }
    return out;
  }
  // Convert's default, plane mode, takes an even rank.
  KvConfig DefaultBudgetBase() const override {
    KvConfig c = KvVariantType::DefaultBudgetBase();
    c.even_rank = true;
    return c;
  }

  std::vector<RopeMode> rope_modes() const override {
    return {RopeMode::kReconstruct, RopeMode::kPlane, RopeMode::kPartial,
            RopeMode::kSharedPlane};
  }
  // Each RoPE mode compared, as its own row.
  std::vector<StudyMode> StudyModes(
      const std::vector<std::string>& rope_modes) const override {
    std::vector<StudyMode> modes;
    for (const std::string& m : rope_modes) {
      modes.push_back({m, ParseRopeMode(m).value_or(RopeMode::kReconstruct)});
    }
    return modes;
  }
  // Plane mode, exact and O(r) per position, unless an odd rank was asked.
  RopeMode DefaultRopeMode(const ConversionOptions& o) const override {
    return o.rank >= 0 && o.rank % 2 != 0 ? RopeMode::kReconstruct
                                          : RopeMode::kPlane;
  }
  // Partial RoPE takes its kept planes from every head's residual: a quarter.
  int64_t DefaultPlanesKept(int64_t planes) const override {
    return std::max<int64_t>(1, planes / 4);
  }
  absl::Status CheckConversion(const ModelConfig& c,
                               const ConversionOptions& o) const override;
  // Plane modes rotate r/2 planes per head; shared-plane H_kv·r/2 shared
  // planes, so H_kv·r must be even.
  void PrepareTarget(const ModelConfig& c, const ConversionOptions& o,
                     KvConfig* target) const override {
    const RopeModeTraits& mode = RopeModeTraitsOf(o.rope_mode);
    target->even_rank = mode.rotates_latents &&
                        (!mode.shares_planes || c.num_kv_heads % 2 != 0);
  }
  absl::Status SetExplicitSize(const ConversionOptions& o,
                               KvConfig* target) const override {
    if (o.rank < 0) return Invalid("lrkv needs --rank r or --budget");
    target->rank = o.rank;
    return absl::OkStatus();
  }

  bool Describes(const ModelConfig& c) const override {
    return c.kv.layout == KvLayout::kLrkv;
  }
  KvConfig FromModel(const ModelConfig& c) const override {
    KvConfig kv;
    kv.variant = id();
    kv.rank = c.kv.rank;
    kv.layer_sizes = c.kv.layer_sizes;
    return kv;
  }

  int64_t DecodeMacs(const AttentionShape& s, const KvConfig& c,
                     const std::string& mode, int64_t L) const override {
    const int64_t H = s.heads, dh = s.head_dim, r = c.rank;
    const int64_t hkv = s.source_kv_heads();
    // Shared key/value dots for every head, latent dots, and the per-step
    // latent projections of q and of the output.
    int64_t macs = 2 * L * H * (dh + r) + 2 * H * r * dh;
    // shared-plane: every head dots all H_kv·r shared K latents (2×2 factors
    // per pair).
    if (mode == "shared-plane") {
      macs = L * H * (2 * dh + hkv * r + r) + H * (2 * hkv * r + r * dh);
    }
    // reconstruct: every cached key is rebuilt (up-projection) and rotated.
    if (mode == "reconstruct") macs += L * hkv * (r * dh + 2 * dh) + H * L * dh;
    return macs;
  }
};

absl::Status Lrkv::CheckConversion(const ModelConfig& c,
                                   const ConversionOptions& o) const {
  if (!RopeModeTraitsOf(o.rope_mode).shares_planes) return absl::OkStatus();
  if (c.qk_norm || c.qkv_bias) {
    return Invalid(
        absl::StrCat("--rope-mode shared-plane: models with ",
                     c.qk_norm ? "QK-norm" : "attention biases",
                     " are not supported (use plane or reconstruct)"));
  }
  if (o.allocation == SizeAllocation::kLayers) {
    return Invalid(
        "--rope-mode shared-plane uses one rank for every layer "
        "(--allocation uniform)");
  }
  if (o.rank >= 0 && (c.num_kv_heads * o.rank) % 2 != 0) {
    return Invalid(absl::StrCat("--rope-mode shared-plane needs H_kv·r even (",
                                c.num_kv_heads, " KV heads, r = ", o.rank,
                                ")"));
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<KvVariantType> MakeLrkvVariant() {
  return std::make_unique<Lrkv>();
}

}  // namespace lrkv
