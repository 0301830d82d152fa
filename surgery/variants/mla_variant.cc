// MLA: one latent of d_c elements per token, up-projected to every KV head's K
// and V; with RoPE mode partial (DeepSeek's decoupled RoPE) also a rotated key
// of d_rope dims that all heads share, cached beside the latent.
#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "surgery/variants/variant_types.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

int64_t MaxLatent(const AttentionShape& s) {
  return std::min(s.d(), 2 * s.source_kv_heads() * s.head_dim);
}

class Mla : public KvVariantType {
 public:
  KvVariant id() const override { return KvVariant::kMla; }
  const char* name() const override { return "mla"; }
  const char* size_label() const override { return "d_c"; }
  int64_t* SizeField(KvConfig* c) const override { return &c->latent; }
  bool allocatable() const override { return true; }
  std::string DescribeExtra(const KvConfig& c) const override {
    return c.rope_dim > 0 ? absl::StrCat(" d_rope=", c.rope_dim) : "";
  }

  int64_t CacheElements(const AttentionShape&,
                        const KvConfig& c) const override {
    return c.latent + c.rope_dim;
  }
  int64_t Parameters(const AttentionShape& s,
                     const KvConfig& c) const override {
    // Down-projection to the latent, up-projections to every KV head's K and
    // V, plus the decoupled RoPE key projection when present.
    const int64_t d = s.d();
    return d * c.latent + c.latent * 2 * s.source_kv_heads() * s.head_dim +
           d * c.rope_dim;
  }
  absl::Status Validate(const AttentionShape& s,
                        const KvConfig& c) const override {
    if (c.latent < 1 || c.latent > MaxLatent(s)) {
      return Invalid(absl::StrCat("MLA latent d_c=", c.latent,
                                  " must lie in [1, ", MaxLatent(s),
                                  "] (min(d, 2*H_kv*d_h))"));
    }
    if (c.rope_dim < 0 || c.rope_dim > s.head_dim || c.rope_dim % 2 != 0) {
      return Invalid(absl::StrCat("MLA decoupled RoPE dims ", c.rope_dim,
                                  " must be even and in [0, ", s.head_dim,
                                  "]"));
    }
    return absl::OkStatus();
  }
  std::vector<KvConfig> BudgetCandidates(const AttentionShape& s,
                                         const KvConfig& base) const override {
    std::vector<KvConfig> out;
    for (int64_t dc = 1; dc <= MaxLatent(s); ++dc) {
      out.push_back(base);
      out.back().latent = dc;
    }
    return out;
  }

  std::vector<RopeMode> rope_modes() const override {
    return {RopeMode::kReconstruct, RopeMode::kPartial};
  }
  // The exact latent, and when partial RoPE is compared the decoupled RoPE of
  // the DeepSeek layout without and with the latent norm llama.cpp and
  // DeepSeek code apply.
  std::vector<StudyMode> StudyModes(
      const std::vector<std::string>& rope_modes) const override {
    std::vector<StudyMode> modes = {{"reconstruct", RopeMode::kReconstruct}};
    if (std::find(rope_modes.begin(), rope_modes.end(),
                  RopeModeName(RopeMode::kPartial)) != rope_modes.end()) {
      modes.push_back({"partial", RopeMode::kPartial});
      modes.push_back({"partial", RopeMode::kPartial, /*latent_norm=*/true});
    }
    return modes;
  }
  bool CachesRopeDims(RopeMode mode) const override {
    return RopeModeTraitsOf(mode).keeps_some_planes;
  }
  // The rotated key is shared by every head, so a plane costs it 2 cached
  // elements in all: every plane by default (stories260K at 50 %: perplexity
  // 5.30 keeping all 4, 76.9 keeping 2, scripts/surgery_table.sh).
  int64_t DefaultPlanesKept(int64_t planes) const override { return planes; }
  bool deepseek_layout() const override { return true; }
  absl::Status CheckConversion(const ModelConfig& c,
                               const ConversionOptions& o) const override;
  void PrepareTarget(const ModelConfig& c, const ConversionOptions& o,
                     KvConfig* target) const override {
    target->rope_dim =
        CachesRopeDims(o.rope_mode) ? 2 * RopePlanesKept(c, o) : 0;
  }
  absl::Status SetExplicitSize(const ConversionOptions& o,
                               KvConfig* target) const override {
    if (o.latent < 0) return Invalid("mla needs --latent d_c or --budget");
    target->latent = o.latent;
    return absl::OkStatus();
  }

  bool Describes(const ModelConfig& c) const override {
    return c.kv.layout == KvLayout::kMla;
  }
  KvConfig FromModel(const ModelConfig& c) const override {
    KvConfig kv;
    kv.variant = id();
    kv.latent = c.kv.latent;
    kv.rope_dim = c.kv.RopeWidth();
    kv.layer_sizes = c.kv.layer_sizes;
    return kv;
  }

  int64_t DecodeMacs(const AttentionShape& s, const KvConfig& c,
                     const std::string& mode, int64_t L) const override {
    const int64_t H = s.heads, dh = s.head_dim;
    if (mode == "partial") {
      // Absorbed (decoupled RoPE): latent and rotated-key dots, latent sums,
      // and the per-step absorption of each query and up-projection of each
      // output.
      return L * H * (2 * c.latent + c.rope_dim) + 2 * H * dh * c.latent;
    }
    // Exact RoPE: keys and values are materialised per head from the latent.
    return 2 * L * H * c.latent * dh + 2 * H * L * dh;
  }
};

absl::Status Mla::CheckConversion(const ModelConfig& c,
                                  const ConversionOptions& o) const {
  if (!CachesRopeDims(o.rope_mode)) return absl::OkStatus();
  if (c.qk_norm) {
    return Invalid(
        "mla --rope-mode partial (decoupled RoPE, the DeepSeek layout) needs "
        "a model without QK-norm: that layout normalises no key (use "
        "--rope-mode reconstruct)");
  }
  if (c.rope_scaling.attention_factor != 1.0) {
    return Invalid(
        "mla --rope-mode partial: the model's rope_scaling scales rotated "
        "dims by an attention factor, which the RoPE-free part would lose "
        "(use --rope-mode reconstruct)");
  }
  if (c.rope_dim == 0) {
    return Invalid(
        "mla --rope-mode partial: the model has no RoPE (use reconstruct)");
  }
  if (o.allocation == SizeAllocation::kLayers &&
      o.allocation_objective == AllocationObjective::kLoss) {
    return Invalid(
        "--allocation-objective loss probes each layer as a dense one; "
        "decoupled-RoPE MLA's keys (d_h + d_rope) have no dense form (use "
        "--allocation-objective error)");
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<KvVariantType> MakeMlaVariant() {
  return std::make_unique<Mla>();
}

}  // namespace lrkv
