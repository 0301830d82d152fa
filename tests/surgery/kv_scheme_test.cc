// The K/V schemes (surgery/kv_scheme.h): the registry answers every conversion
// target with the scheme whose converted config ConvertModel writes, and the
// driver and the per-layer allocation stage take a scheme they do not know (a
// test-only one).
#include "surgery/kv_scheme.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/llama_weights.h"
#include "surgery/converter.h"
#include "tests/model_test_util.h"

namespace lrkv {
namespace {

using testing::LoadStories;
using Stories = testing::StoriesModel;

TEST(KvScheme, EveryTargetHasTheSchemeWhoseConfigTheConversionWrites) {
  const Stories s = LoadStories();
  int made = 0;
  for (KvVariant v :
       {KvVariant::kGqa, KvVariant::kMqa, KvVariant::kMla, KvVariant::kLrkv}) {
    for (RopeMode mode : {RopeMode::kReconstruct, RopeMode::kPlane,
                          RopeMode::kPartial, RopeMode::kSharedPlane}) {
      ConversionOptions o;
      o.variant = v;
      o.rope_mode = mode;
      o.max_iters = 5;
      if (v == KvVariant::kGqa) o.kv_heads = 2;
      if (v == KvVariant::kMla) o.latent = 24;
      if (v == KvVariant::kLrkv) o.rank = 2;
      auto scheme = MakeKvScheme(s.config, o);
      const auto target = ResolveTarget(s.config, o);
      ASSERT_EQ(scheme.ok(), target.ok())
          << KvVariantName(v) << " " << RopeModeName(mode);
      if (!scheme.ok()) {
        EXPECT_EQ(scheme.status(), target.status());
        continue;
      }
      ++made;
      // Shared-plane LRKV has one rank for every layer.
      const bool sized =
          v == KvVariant::kMla ||
          (v == KvVariant::kLrkv && mode != RopeMode::kSharedPlane);
      EXPECT_EQ((*scheme)->sized(), sized);
      EXPECT_EQ((*scheme)->target().ToString(), target->ToString());
      auto converted = ConvertModel(s.config, s.weights, o, nullptr, nullptr);
      ASSERT_TRUE(converted.ok()) << converted.status();
      const ModelConfig& c = (*scheme)->converted_config();
      EXPECT_EQ(c.kv.layout, converted->config.kv.layout);
      EXPECT_EQ(c.kv.rank, converted->config.kv.rank);
      EXPECT_EQ(c.kv.latent, converted->config.kv.latent);
      EXPECT_EQ(c.kv.rope_mode, converted->config.kv.rope_mode);
      EXPECT_EQ(c.num_kv_heads, converted->config.num_kv_heads);
    }
  }
  // GQA and MQA in their one mode each and the RoPE modes LRKV and MLA take
  // (stories has RoPE: shared-plane is LRKV's, partial both's).
  EXPECT_GE(made, 8);
}

// A scheme only this test knows: each KV head's K and V replaced by its best
// rank-r approximation (truncated SVD), kept in the dense layout, sized by r
// and costed as LRKV at rank r (the dense layout records no sizes in the
// model's config). Its curve is the SVD's squared tail over every rank.
class HeadTruncationScheme final : public KvScheme {
 public:
  using KvScheme::KvScheme;
  bool sized() const override { return true; }

  static at::Tensor Truncate(const at::Tensor& w, int64_t heads, int64_t dh,
                             int64_t r) {
    std::vector<at::Tensor> out;
    for (int64_t h = 0; h < heads; ++h) {
      auto [u, sv, vh] =
          at::linalg_svd(w.narrow(0, h * dh, dh).to(at::kDouble), false);
      out.push_back(at::matmul(u.narrow(1, 0, r) * sv.narrow(0, 0, r),
                               vh.narrow(0, 0, r)));
    }
    return at::cat(out, 0).to(at::kFloat);
  }

  absl::StatusOr<LayerErrorCurve> Curve(const SourceLayer& layer,
                                        const CandidateLoss*) override {
    LayerErrorCurve curve;
    const int64_t heads = source_.num_kv_heads, dh = source_.head_dim;
    for (int64_t r = 0; r <= dh; ++r) {
      double e = 0;
      for (const at::Tensor& w : {layer.kv.wk, layer.kv.wv}) {
        e += (w - Truncate(w, heads, dh, r)).pow(2).sum().item<double>();
      }
      curve.sizes.push_back(r);
      curve.errors.push_back(e);
    }
    return curve;
  }

  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights* l) override {
    const int64_t r = LayerSize(layer.index);
    l->wk = Truncate(layer.kv.wk, source_.num_kv_heads, source_.head_dim, r);
    l->wv = Truncate(layer.kv.wv, source_.num_kv_heads, source_.head_dim, r);
    LayerReport row;
    row.layer = layer.index;
    row.size = r;
    return row;
  }

 protected:
  int64_t* SizeOf(KvConfig* c) const override { return &c->rank; }
};

TEST(KvScheme, ATestOnlySchemeRunsThroughTheDriverAndTheAllocationStage) {
  const Stories s = LoadStories();
  ConversionOptions o;
  o.allocation = SizeAllocation::kLayers;
  o.allocation_objective = AllocationObjective::kError;
  SchemeSetup setup;
  setup.source = &s.config;
  setup.options = &o;
  setup.target.variant = KvVariant::kLrkv;
  setup.target.rank = 3;
  HeadTruncationScheme scheme(setup);
  ConversionReport report;
  auto converted =
      ConvertWithScheme(scheme, s.config, s.weights, o, nullptr, &report);
  ASSERT_TRUE(converted.ok()) << converted.status();
  // The stage measured the scheme's own curve for every layer and kept the plan
  // within the uniform rank's total cache.
  ASSERT_EQ(report.allocation_curves.size(),
            static_cast<size_t>(s.config.num_layers));
  const int64_t dh = s.config.head_dim;
  int64_t cache = 0;
  for (int64_t i = 0; i < s.config.num_layers; ++i) {
    const LayerErrorCurve& curve = report.allocation_curves[i];
    ASSERT_EQ(curve.sizes.size(), static_cast<size_t>(dh + 1));
    EXPECT_LT(curve.errors.back(), 1e-9 * curve.errors.front());
    const int64_t r = report.layers[i].size;
    EXPECT_EQ(r, scheme.LayerSize(i));
    cache += scheme.CacheCost(r);
    // The written layer is the scheme's truncation at the planned rank.
    const at::Tensor wk = s.weights.layers[i].wk.to(at::kFloat);
    EXPECT_TRUE(at::allclose(
        converted->weights.layers[i].wk,
        HeadTruncationScheme::Truncate(wk, s.config.num_kv_heads, dh, r)));
  }
  EXPECT_LE(cache, s.config.num_layers * scheme.CacheCost(3));
  EXPECT_EQ(report.allocation_budget_elements,
            s.config.num_layers * scheme.CacheCost(3));
  EXPECT_EQ(report.allocation_objective, AllocationObjective::kError);
}

}  // namespace
}  // namespace lrkv
