// Verification: factored decoding equals expanded decoding for every exact RoPE
// mode (fp32 and bf16 caches, with and without QK-norm), the naive latent
// rotation does not, and every engine's cache holds exactly the bytes the
// accounting formula says.
#include <ATen/Parallel.h>

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/decode_attention.h"
#include "model/checkpoint.h"
#include "runtime/decode_engine.h"
#include "runtime/llama_weights.h"
#include "runtime/rope.h"
#include "surgery/cache_accounting.h"
#include "surgery/convert_job.h"
#include "surgery/converter.h"
#include "tests/model_test_util.h"
#include "tests/test_paths.h"
#include "verify/equivalence.h"
#include "verify/head_diversity.h"
#include "verify/verify_job.h"

namespace lrkv {
namespace {

using Model = testing::StoriesModel;

Model Stories() { return testing::LoadStories(); }

Model RandomQkNorm(int64_t head_dim = 64) {
  ModelConfig c = testing::SmallConfig();
  c.hidden_size = 128;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = c.rope_dim = head_dim;
  c.qk_norm = true;
  c.model_type = "qwen3";
  return {c, RandomLlamaWeights(c, 99)};
}

Model Convert(const Model& m, KvVariant variant, int64_t size, RopeMode mode) {
  ConversionOptions o;
  o.variant = variant;
  o.rope_mode = mode;
  if (variant == KvVariant::kLrkv) o.rank = size;
  if (variant == KvVariant::kMla) o.latent = size;
  if (variant == KvVariant::kGqa) o.kv_heads = size;
  if (mode == RopeMode::kPartial) o.rope_planes_kept = 1;
  auto out = ConvertModel(m.config, m.weights, o, nullptr, nullptr);
  EXPECT_TRUE(out.ok()) << out.status();
  return {out->config, out->weights};
}

EquivalenceOptions Prompt(const Model& m, at::ScalarType dtype) {
  EquivalenceOptions o;
  o.prompt = {1};
  for (int i = 0; i < 23; ++i)
    o.prompt.push_back(3 + (i * 37) % (m.config.vocab_size - 3));
  o.decode_tokens = 12;
  o.cache_dtype = dtype;
  return o;
}

EquivalenceResult Check(const Model& m, DecodeMode mode, at::ScalarType dtype,
                        FactoredCacheLayout layout = FactoredCacheLayout::kAuto,
                        DecodeFault fault = DecodeFault::kNone) {
  EquivalenceOptions o = Prompt(m, dtype);
  o.factored_layout = layout;
  o.fault = fault;
  auto r = CheckEquivalence(m.config, m.weights, mode, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

// Plane mode runs with its cache in rows (the row kernel) and in tiles (the
// fused kernel where the CPU has it, else the tiles copied to rows).
void ExpectExact(const Model& m, DecodeMode mode) {
  std::vector<FactoredCacheLayout> layouts = {FactoredCacheLayout::kAuto};
  if (mode == DecodeMode::kPlane) {
    layouts = {FactoredCacheLayout::kRows, FactoredCacheLayout::kTiles};
  }
  for (FactoredCacheLayout layout : layouts)
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const EquivalenceResult r = Check(m, mode, dtype, layout);
      SCOPED_TRACE(std::string(DecodeModeName(mode)) + " " + r.dtype +
                   (layout == FactoredCacheLayout::kTiles  ? " tiles"
                    : layout == FactoredCacheLayout::kRows ? " rows"
                                                           : ""));
      ASSERT_TRUE(r.applicable) << r.reason;
      if (layout == FactoredCacheLayout::kTiles)
        EXPECT_EQ(r.cache_layout, "tiles");
      if (layout == FactoredCacheLayout::kRows)
        EXPECT_EQ(r.cache_layout, "rows");
      EXPECT_TRUE(r.equivalent)
          << "error " << r.candidate_error << " plain " << r.reference_error
          << " bound " << r.bound << " ratio " << r.ratio << " at site "
          << r.worst_site << " first bad step " << r.first_bad_step << " layer "
          << r.first_bad_layer;
      EXPECT_TRUE(r.passed());
      EXPECT_FALSE(r.non_finite);
      EXPECT_EQ(r.steps, 36);
      EXPECT_EQ(r.decode_tokens, 12);
      EXPECT_LE(r.ratio, 1.0);
      EXPECT_EQ(r.tokens_agreed + r.tokens_tied, 12);
      // Both errors are measured, not assumed: fp32 arithmetic is never exact
      // against float64.
      EXPECT_GT(r.candidate_error, 0.0);
      EXPECT_GT(r.reference_error, 0.0);
      if (dtype == at::kFloat) {
        EXPECT_LE(r.worst_logits.max_rel, 1e-4);
      }
    }
}

// A wrong decode must fail by orders of magnitude. fp32, the proof dtype: by
// >= 100x the bound (measured >= 3.6e5x for naive). bf16: rounding a stories
// key to bf16 already costs ~0.4%, and the naive rotation's error at r = 2-4 is
// only ~50-130x that, so the margin asserted there is 10x.
void ExpectWrong(const EquivalenceResult& r) {
  ASSERT_TRUE(r.applicable) << r.reason;
  EXPECT_FALSE(r.equivalent);
  EXPECT_GE(r.first_bad_step, 0);
  EXPECT_GE(r.ratio, r.dtype == "fp32" ? 100.0 : 10.0)
      << r.mode << " " << r.dtype;
}

void ExpectNaiveFails(const Model& m) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const EquivalenceResult r = Check(m, DecodeMode::kNaive, dtype);
    ExpectWrong(r);
    EXPECT_TRUE(r.passed());  // the control is expected to fail
  }
}

// r = 0 keeps only the shared projection (no residual, no planes): every engine
// must still run and agree.
TEST(Equivalence, RankZeroPlaneModelDecodesExactly) {
  const Model plane = Convert(Stories(), KvVariant::kLrkv, 0, RopeMode::kPlane);
  ExpectExact(plane, DecodeMode::kReconstruct);
  ExpectExact(plane, DecodeMode::kPlane);
}

TEST(Equivalence, StoriesReconstructAndPlaneAreExactNaiveIsNot) {
  const Model stories = Stories();
  for (int64_t r : {2, 4}) {
    SCOPED_TRACE(r);
    const Model plane = Convert(stories, KvVariant::kLrkv, r, RopeMode::kPlane);
    ExpectExact(plane, DecodeMode::kReconstruct);
    ExpectExact(plane, DecodeMode::kPlane);
    ExpectNaiveFails(plane);
    // A model converted without the plane constraint cannot use the plane
    // engine.
    const Model free =
        Convert(stories, KvVariant::kLrkv, r, RopeMode::kReconstruct);
    ExpectExact(free, DecodeMode::kReconstruct);
    ExpectNaiveFails(free);
    const EquivalenceResult na = Check(free, DecodeMode::kPlane, at::kFloat);
    EXPECT_FALSE(na.applicable);
    EXPECT_THAT(na.reason,
                ::testing::HasSubstr("not a selection of whole RoPE planes"));
  }
}

TEST(Equivalence, QkNormModelWithHeadDim64AtRank16) {
  const Model src = RandomQkNorm();
  const Model plane = Convert(src, KvVariant::kLrkv, 16, RopeMode::kPlane);
  ExpectExact(plane, DecodeMode::kReconstruct);
  ExpectExact(plane, DecodeMode::kPlane);
  ExpectNaiveFails(plane);
}

// The other decoding errors the error model must catch: a dropped σ (QK-norm)
// and latents rotated with the wrong plane's frequency.
TEST(Equivalence, DroppedSigmaAndWrongPlaneFailByOrdersOfMagnitude) {
  const Model plane =
      Convert(RandomQkNorm(), KvVariant::kLrkv, 16, RopeMode::kPlane);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (DecodeMode mode : {DecodeMode::kReconstruct, DecodeMode::kPlane}) {
      ExpectWrong(Check(plane, mode, dtype, FactoredCacheLayout::kAuto,
                        DecodeFault::kDropSigma));
    }
    ExpectWrong(Check(plane, DecodeMode::kPlane, dtype,
                      FactoredCacheLayout::kAuto, DecodeFault::kWrongPlane));
  }
  const Model stories =
      Convert(Stories(), KvVariant::kLrkv, 4, RopeMode::kPlane);
  ExpectWrong(Check(stories, DecodeMode::kPlane, at::kFloat,
                    FactoredCacheLayout::kRows, DecodeFault::kWrongPlane));
}

// Modes checked together step in lockstep, their engines in the references'
// passes over the weights: each mode's verdict is its own. A wrong plane in
// the plane engine fails plane alone, the exact mode beside it still passes,
// and every result (steps, tokens, error ratio) matches the mode checked by
// itself: bit for bit on the AVX2 EPYC this was written on, up to the rounding
// of differently grouped products where a kernel groups rows by batch size
// (AVX-512's bf16 mat-vec).
TEST(Equivalence, ModesCheckedTogetherKeepTheirOwnVerdicts) {
  const Model plane =
      Convert(RandomQkNorm(), KvVariant::kLrkv, 16, RopeMode::kPlane);
  const std::vector<DecodeMode> modes = {
      DecodeMode::kReconstruct, DecodeMode::kPlane, DecodeMode::kPartial,
      DecodeMode::kNaive};
  EquivalenceOptions o = Prompt(plane, at::kFloat);
  o.fault = DecodeFault::kWrongPlane;
  int64_t steps_seen = 0;
  o.on_step = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, ++steps_seen);
    EXPECT_EQ(total, static_cast<int64_t>(o.prompt.size()) + o.decode_tokens);
  };
  auto together = CheckEquivalences(plane.config, plane.weights, modes, o);
  ASSERT_TRUE(together.ok()) << together.status();
  ASSERT_EQ(together->size(), modes.size());
  EXPECT_EQ(steps_seen,
            static_cast<int64_t>(o.prompt.size()) + o.decode_tokens);
  o.on_step = nullptr;
  for (size_t i = 0; i < modes.size(); ++i) {
    SCOPED_TRACE(DecodeModeName(modes[i]));
    const EquivalenceResult& r = (*together)[i];
    auto alone = CheckEquivalence(plane.config, plane.weights, modes[i], o);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(r.mode, alone->mode);
    EXPECT_EQ(r.applicable, alone->applicable);
    EXPECT_EQ(r.equivalent, alone->equivalent);
    EXPECT_EQ(r.steps, alone->steps);
    EXPECT_EQ(r.tokens_agreed, alone->tokens_agreed);
    if (r.applicable) {
      EXPECT_NEAR(r.ratio, alone->ratio, 0.25 * alone->ratio) << r.ratio;
    }
  }
  EXPECT_TRUE((*together)[0].equivalent);   // reconstruct: exact
  EXPECT_FALSE((*together)[1].equivalent);  // plane, with the wrong plane
  EXPECT_FALSE((*together)[2].applicable);  // partial: not this conversion
  EXPECT_FALSE((*together)[3].equivalent);  // naive
}

// CI runs on whichever CPU it gets: the verdict of each case must not depend
// on the kernel build (generic, AVX2, AVX-512 with the fused tiled kernel) or
// the thread count, only the measured errors may.
TEST(Equivalence, VerdictsAreTheSameOnEveryKernelBuildAndThreadCount) {
  const Model stories =
      Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane);
  const Model qk =
      Convert(RandomQkNorm(128), KvVariant::kLrkv, 16, RopeMode::kPlane);
  const int threads = at::get_num_threads();
  std::vector<std::string> isas = {"generic", "avx2", ""};
  for (const Model* m : {&stories, &qk}) {
    for (const std::string& isa : isas) {
      kernels::ForceKernelIsa(isa);
      for (int t : {1, 2}) {
        at::set_num_threads(t);
        SCOPED_TRACE(absl::StrCat(kernels::KernelIsa(), " threads ", t,
                                  " head_dim ", m->config.head_dim));
        for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
          for (DecodeMode mode :
               {DecodeMode::kReconstruct, DecodeMode::kPlane}) {
            const EquivalenceResult r = Check(*m, mode, dtype);
            EXPECT_TRUE(r.equivalent)
                << r.mode << " " << r.dtype << " ratio " << r.ratio;
            EXPECT_LE(r.ratio, 1.0);
          }
          const EquivalenceResult naive = Check(*m, DecodeMode::kNaive, dtype);
          EXPECT_FALSE(naive.equivalent) << naive.dtype;
        }
      }
    }
  }
  kernels::ForceKernelIsa("");
  at::set_num_threads(threads);
}

TEST(Equivalence, BiasedModelsStayExact) {
  Model src = RandomQkNorm(32);
  src.config.qkv_bias = true;
  src.weights = RandomLlamaWeights(src.config, 5);
  ExpectExact(Convert(src, KvVariant::kLrkv, 8, RopeMode::kPlane),
              DecodeMode::kPlane);
  ExpectExact(Convert(src, KvVariant::kLrkv, 8, RopeMode::kReconstruct),
              DecodeMode::kReconstruct);
  const Model partial = Convert(src, KvVariant::kLrkv, 8, RopeMode::kPartial);
  ExpectExact(partial, DecodeMode::kPartial);
  ExpectExact(partial, DecodeMode::kReconstruct);
}

TEST(Equivalence, PartialModeAndMlaReconstructAreExact) {
  const Model stories = Stories();
  const Model partial =
      Convert(stories, KvVariant::kLrkv, 4, RopeMode::kPartial);
  ExpectExact(partial, DecodeMode::kPartial);
  ExpectExact(partial, DecodeMode::kReconstruct);
  ExpectNaiveFails(partial);
  const Model mla =
      Convert(stories, KvVariant::kMla, 24, RopeMode::kReconstruct);
  ExpectExact(mla, DecodeMode::kReconstruct);
  EXPECT_FALSE(Check(mla, DecodeMode::kPlane, at::kFloat).applicable);
  EXPECT_FALSE(Check(stories, DecodeMode::kReconstruct, at::kFloat).applicable);
}

// MLA with decoupled RoPE decodes absorbed (the latent and the shared rotated
// key, through the factored kernel) exactly as its own expansion does; a
// rotated key turned with the wrong plane's frequency fails by orders of
// magnitude.
TEST(Equivalence, MlaWithDecoupledRopeIsExactAndAWrongPlaneIsNot) {
  const Model stories = Stories();
  const Model mla = Convert(stories, KvVariant::kMla, 24, RopeMode::kPartial);
  ASSERT_TRUE(mla.config.kv.DecoupledRope());
  ExpectExact(mla, DecodeMode::kPartial);
  EXPECT_FALSE(Check(mla, DecodeMode::kReconstruct, at::kFloat).applicable);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    ExpectWrong(Check(mla, DecodeMode::kPartial, dtype,
                      FactoredCacheLayout::kAuto, DecodeFault::kWrongPlane));
  }
  // A biased GQA model with partial rotary dims, two planes kept.
  Model src = RandomQkNorm(32);
  src.config.qk_norm = false;
  src.config.qkv_bias = true;
  src.config.rope_dim = 16;
  src.weights = RandomLlamaWeights(src.config, 11);
  ConversionOptions o;
  o.variant = KvVariant::kMla;
  o.rope_mode = RopeMode::kPartial;
  o.rope_planes_kept = 2;
  o.latent = 40;
  auto biased = ConvertModel(src.config, src.weights, o, nullptr, nullptr);
  ASSERT_TRUE(biased.ok()) << biased.status();
  ExpectExact({biased->config, biased->weights}, DecodeMode::kPartial);
  // The engine holds d_c + d_rope per token and layer.
  EngineOptions eo;
  eo.capacity = 9;
  auto engine =
      CreateDecodeEngine(mla.config, mla.weights, DecodeMode::kPartial, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  at::NoGradGuard no_grad;
  for (int t = 0; t < 9; ++t) (*engine)->Step(at::full({1}, 1 + t, at::kLong));
  EXPECT_EQ((*engine)->MeasureCache().used_bytes,
            mla.config.num_layers * 9 * (24 + mla.config.kv.RopeWidth()) * 4);
}

// MLA with a latent norm (DeepSeek-V3's kv_a_layernorm, γ away from 1): the
// factored engine caches the normalised latent and decodes exactly as the
// expanded engine, which projects through the norm itself; the wrong-plane
// fault still fails.
TEST(Equivalence, MlaWithALatentNormIsExact) {
  Model mla = Convert(Stories(), KvVariant::kMla, 24, RopeMode::kPartial);
  mla.config.kv.latent_norm = true;
  at::manual_seed(3);
  for (LayerWeights& l : mla.weights.layers) {
    l.kv_norm = 0.5 + at::rand({24}, at::kFloat);
  }
  ExpectExact(mla, DecodeMode::kPartial);
  ExpectWrong(Check(mla, DecodeMode::kPartial, at::kFloat,
                    FactoredCacheLayout::kAuto, DecodeFault::kWrongPlane));
}

// Shared-plane LRKV (K latents shared by the heads, each plane read through a
// per-head complex factor) decodes by associativity exactly as its expansion
// does; turning the shared latents with the wrong planes' frequencies fails by
// orders of magnitude, and the per-head modes do not apply to it.
TEST(Equivalence, SharedPlaneLrkvIsExactAndAWrongPlaneIsNot) {
  const Model stories = Stories();
  const Model shared =
      Convert(stories, KvVariant::kLrkv, 2, RopeMode::kSharedPlane);
  ASSERT_EQ(shared.config.kv.rope_mode, RopeMode::kSharedPlane);
  ExpectExact(shared, DecodeMode::kSharedPlane);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    ExpectWrong(Check(shared, DecodeMode::kSharedPlane, dtype,
                      FactoredCacheLayout::kAuto, DecodeFault::kWrongPlane));
  }
  for (DecodeMode m :
       {DecodeMode::kPlane, DecodeMode::kReconstruct, DecodeMode::kNaive}) {
    EXPECT_FALSE(Check(shared, m, at::kFloat).applicable) << DecodeModeName(m);
  }
  const Model plane = Convert(stories, KvVariant::kLrkv, 2, RopeMode::kPlane);
  EXPECT_FALSE(Check(plane, DecodeMode::kSharedPlane, at::kFloat).applicable);
  // A GQA model with partial rotary dims (position-free pairs may be shared
  // too).
  Model src = RandomQkNorm(32);
  src.config.qk_norm = false;
  src.config.rope_dim = 16;
  src.weights = RandomLlamaWeights(src.config, 13);
  ExpectExact(Convert(src, KvVariant::kLrkv, 4, RopeMode::kSharedPlane),
              DecodeMode::kSharedPlane);
  // LRKV's own cache: 2(d_h + H_kv·r) per token and layer.
  EngineOptions eo;
  eo.capacity = 7;
  auto engine = CreateDecodeEngine(shared.config, shared.weights,
                                   DecodeMode::kSharedPlane, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  at::NoGradGuard no_grad;
  for (int t = 0; t < 7; ++t) (*engine)->Step(at::full({1}, 1 + t, at::kLong));
  const ModelConfig& c = shared.config;
  EXPECT_EQ((*engine)->MeasureCache().used_bytes,
            c.num_layers * 7 * 2 * (c.head_dim + c.num_kv_heads * 2) * 4);
}

// docs/design.md, "The math that must hold": with B = e₁ and a 90° rotation, P
// B = e₂ is not B times any scalar, so no rotation of a 1-d latent can stand in
// for rotating the key.
TEST(RopeCounterexample, RotationDoesNotCommuteWithAGeneralB) {
  const at::Tensor b = at::tensor({1.0, 0.0}, at::kDouble);  // e₁
  const at::Tensor p =
      at::tensor({0.0, -1.0, 1.0, 0.0}, at::kDouble).view({2, 2});
  const at::Tensor pb = at::matmul(p, b);
  EXPECT_TRUE(at::allclose(pb, at::tensor({0.0, 1.0}, at::kDouble)));
  // Best scalar c minimising ‖P B − B c‖: c = Bᵀ P B / BᵀB = 0, residual ‖e₂‖
  // = 1.
  const double c = b.dot(pb).item<double>() / b.dot(b).item<double>();
  EXPECT_DOUBLE_EQ((pb - b * c).norm().item<double>(), 1.0);
  // The same through the model's RoPE: a 2-d head at the position whose angle
  // is 90°.
  ModelConfig cfg;
  cfg.head_dim = cfg.rope_dim = 2;
  cfg.rope_theta = 10000;
  cfg.rope_layout = RopeLayout::kAdjacent;
  const Rope rope(cfg);
  // inv_freq of plane 0 is 1, so position 0 rotates by 0; check a π/2 turn
  // directly by rotating e₁ at every position and measuring what stays on e₁'s
  // axis.
  const auto e1 = at::tensor({1.0f, 0.0f}).view({1, 1, 1, 2});
  const auto rotated =
      rope.Rotate(e1.expand({1, 8, 1, 2}), at::arange(8, at::kLong));
  const auto off_axis = rotated.select(-1, 1).abs().max().item<float>();
  EXPECT_GT(off_axis, 0.9f);  // rotated keys leave span(B) = span(e₁)
}

int64_t FormulaBytes(const ModelConfig& c, const KvConfig& kv, int64_t tokens,
                     int64_t bytes) {
  return MeasureFootprint(ShapeOf(c), kv, tokens, 1, bytes).bytes;
}

TEST(CacheMeasurement, EveryEngineHoldsExactlyTheFormulaBytes) {
  for (bool qk_norm : {false, true}) {
    Model src = RandomQkNorm(16);
    src.config.qk_norm = qk_norm;
    src.config.num_heads = 4;
    src.config.num_kv_heads = 4;  // MHA source
    src.weights = RandomLlamaWeights(src.config, 3);
    struct Case {
      KvVariant variant;
      int64_t size;
      DecodeMode mode;
      FactoredCacheLayout layout = FactoredCacheLayout::kAuto;
    } cases[] = {
        {KvVariant::kMha, 0, DecodeMode::kExpanded},
        {KvVariant::kGqa, 2, DecodeMode::kExpanded},
        {KvVariant::kMqa, 0, DecodeMode::kExpanded},
        {KvVariant::kMla, 40, DecodeMode::kReconstruct},
        {KvVariant::kLrkv, 4, DecodeMode::kReconstruct},
        {KvVariant::kLrkv, 4, DecodeMode::kPlane, FactoredCacheLayout::kRows},
        {KvVariant::kLrkv, 4, DecodeMode::kPlane, FactoredCacheLayout::kTiles},
    };
    for (const auto& cs : cases) {
      const Model m =
          cs.variant == KvVariant::kMha
              ? src
              : Convert(src, cs.variant, cs.size,
                        cs.mode == DecodeMode::kPlane ? RopeMode::kPlane
                                                      : RopeMode::kReconstruct);
      KvConfig kv;
      kv.variant = cs.variant;
      kv.kv_heads = cs.size;
      kv.latent = cs.size;
      kv.rank = cs.size;
      for (int64_t tokens : {1, 17, 1024}) {
        for (auto [dtype, bytes] :
             {std::pair{at::kFloat, 4}, {at::kBFloat16, 2}}) {
          EngineOptions eo;
          eo.cache_dtype = dtype;
          eo.capacity = tokens;
          eo.factored_layout = cs.layout;
          auto engine = CreateDecodeEngine(m.config, m.weights, cs.mode, eo);
          ASSERT_TRUE(engine.ok()) << engine.status();
          at::NoGradGuard no_grad;
          for (int64_t t = 0; t < tokens; ++t) {
            (*engine)->Step(at::full({1}, 1 + t % 50, at::kLong));
          }
          const CacheMeasurement cm = (*engine)->MeasureCache();
          const int64_t formula = FormulaBytes(src.config, kv, tokens, bytes);
          EXPECT_EQ(cm.used_bytes, formula)
              << kv.ToString() << " qk_norm=" << qk_norm << " L=" << tokens;
          // A tiled cache allocates whole tiles of 16 positions.
          const int64_t allocated = cs.layout == FactoredCacheLayout::kTiles
                                        ? (tokens + 15) / 16 * 16
                                        : tokens;
          EXPECT_EQ(cm.allocated_bytes,
                    FormulaBytes(src.config, kv, allocated, bytes))
              << kv.ToString() << " qk_norm=" << qk_norm << " L=" << tokens;
        }
      }
    }
  }
}

TEST(CacheMeasurement, CacheGrowsAndUsedBytesFollowTheTokens) {
  const Model m = Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane);
  EngineOptions eo;
  eo.capacity = 4;
  auto engine = CreateDecodeEngine(m.config, m.weights, DecodeMode::kPlane, eo);
  ASSERT_TRUE(engine.ok());
  at::NoGradGuard no_grad;
  for (int t = 0; t < 10; ++t) (*engine)->Step(at::full({1}, 5, at::kLong));
  const CacheMeasurement cm = (*engine)->MeasureCache();
  // 5 layers × 2(8 + 4·2) elements × 4 bytes per token.
  EXPECT_EQ(cm.used_bytes, 10 * 5 * 32 * 4);
  EXPECT_EQ(cm.allocated_bytes, 16 * 5 * 32 * 4);
}

TEST(HeadDiversity, TraceIdentityMatchesTheExplicitBilinearForms) {
  const int64_t h = 6, hkv = 3, dh = 4, d = 10;
  const auto wq = at::randn({h * dh, d}, at::kDouble);
  const auto wk = at::randn({hkv * dh, d}, at::kDouble);
  const auto g = BilinearGram(wq, wk, h, hkv, dh);
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < h; ++j) {
      const auto ai = at::matmul(wq.narrow(0, i * dh, dh).t(),
                                 wk.narrow(0, i / 2 * dh, dh));
      const auto aj = at::matmul(wq.narrow(0, j * dh, dh).t(),
                                 wk.narrow(0, j / 2 * dh, dh));
      EXPECT_NEAR(g[i][j].item<double>(), (ai * aj).sum().item<double>(), 1e-9);
    }
  }
}

TEST(HeadDiversity, CentredRankIsBoundedAndVanishesForIdenticalHeads) {
  for (int64_t h : {2, 6, 12}) {
    const auto wq = at::randn({h * 8, 32}, at::kDouble);
    const auto wk = at::randn({h * 8, 32}, at::kDouble);
    const HeadDiversity random =
        MeasureHeadDiversity(BilinearGram(wq, wk, h, h, 8));
    EXPECT_LE(random.centred, h - 1 + 1e-9);
    EXPECT_GT(random.centred, 0.5 * (h - 1));  // random heads are diverse
    EXPECT_LE(random.uncentred, h + 1e-9);
    const auto one_q = at::randn({8, 32}, at::kDouble),
               one_k = at::randn({8, 32}, at::kDouble);
    const HeadDiversity same = MeasureHeadDiversity(
        BilinearGram(one_q.repeat({h, 1}), one_k.repeat({h, 1}), h, h, 8));
    EXPECT_LT(same.centred, 1e-6);
    EXPECT_NEAR(same.uncentred, 1.0, 1e-6);
  }
}

class VerifyJobTest : public ::testing::Test {
 protected:
  std::string Save(const std::string& name, const Model& m) {
    const auto dir = testing::FreshTempDir(name);
    auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
    EXPECT_TRUE(SaveSafetensorsCheckpoint(dir.string(), m.config, m.weights,
                                          (*ckpt)->tokenizer())
                    .ok());
    return dir.string();
  }
  // A verify of `dir` on a short prompt, the other options at their defaults.
  static VerifyJobOptions Short(const std::string& dir, int64_t prompt_tokens,
                                int64_t decode_tokens) {
    VerifyJobOptions o;
    o.checkpoint = dir;
    o.prompt_tokens = prompt_tokens;
    o.decode_tokens = decode_tokens;
    return o;
  }
};

TEST_F(VerifyJobTest, StoriesPlaneModelPassesWithFidelityAndReports) {
  const std::string dir =
      Save("verify_plane",
           Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane));
  VerifyJobOptions o;
  o.checkpoint = dir;
  o.source = testing::StoriesModelPath();
  o.text = testing::StoriesTextPath();
  o.prompt_tokens = 16;
  o.decode_tokens = 8;
  o.dtype = "both";
  o.fidelity_tokens = 2000;
  auto r = RunVerifyJob(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->passed()) << r->ToTable();
  ASSERT_EQ(r->equivalence.size(), 8u);  // 4 modes x 2 dtypes
  EXPECT_FALSE(
      r->equivalence[2].applicable);  // partial: not a partial-RoPE model
  EXPECT_FALSE(r->equivalence[3].equivalent);  // naive
  ASSERT_TRUE(r->fidelity.has_value());
  EXPECT_EQ(r->fidelity->tokens, 2000);
  EXPECT_GT(r->fidelity->kl_mean, 0.0);
  EXPECT_LT(r->fidelity->top1_agreement, 1.0);
  EXPECT_GT(r->fidelity->converted_perplexity, r->fidelity->source_perplexity);
  for (const auto& c : r->cache) {
    EXPECT_TRUE(c.passed()) << c.engine;
    EXPECT_GE(c.allocated_bytes, c.used_bytes) << c.engine;
  }
  ASSERT_TRUE(r->diversity.has_value());
  EXPECT_TRUE(r->diversity->has_source);
  EXPECT_LE(r->diversity->source_centred, 7.0);
  const std::string junit = r->ToJUnit();
  EXPECT_THAT(junit, ::testing::HasSubstr("failures=\"0\""));
  EXPECT_THAT(junit, ::testing::HasSubstr("skipped=\"2\""));
  EXPECT_EQ(r->ToJson()["passed"], true);
  // Read back from its JSON (as a remote verify's report arrives), it prints
  // the same table and JUnit.
  auto back = VerifyReportFromJson(r->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToTable(), r->ToTable());
  EXPECT_EQ(back->ToJUnit(), junit);
  EXPECT_EQ(VerifyReportFromJson(nlohmann::json::object()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// At rank 0 in every layer (the Qwen2.5-0.5B shape, H_kv = 2, at budget 0.5)
// there is no residual for naive decoding to get wrong: "all" runs no naive
// control there (it used to, and failed the verdict with "expected NOT
// EQUIVALENT: it was EQUIVALENT"), and the exact modes pass.
TEST_F(VerifyJobTest, RankZeroModelHasNoNaiveControlAndPasses) {
  const std::string dir =
      Save("verify_rank0",
           Convert(Stories(), KvVariant::kLrkv, 0, RopeMode::kPlane));
  auto r = RunVerifyJob(Short(dir, 8, 4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->passed()) << r->ToTable();
  ASSERT_FALSE(r->equivalence.empty());
  for (const auto& e : r->equivalence) {
    EXPECT_NE(e.mode, DecodeModeName(DecodeMode::kNaive)) << r->ToTable();
  }
}

// Quality gates on fidelity: bounds around the measured figures pass and fail
// as they should, in the verdict, the JSON (read back), the JUnit and the
// table; gates without a source or text are refused before any work.
TEST_F(VerifyJobTest, QualityGatesJudgeFidelityAgainstTheirBounds) {
  const std::string dir =
      Save("verify_gates",
           Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane));
  VerifyJobOptions o;
  o.checkpoint = dir;
  o.source = testing::StoriesModelPath();
  o.text = testing::StoriesTextPath();
  o.modes = {"plane"};
  o.prompt_tokens = 8;
  o.decode_tokens = 4;
  o.fidelity_tokens = 1000;
  auto measured = RunVerifyJob(o);
  ASSERT_TRUE(measured.ok()) << measured.status();
  ASSERT_TRUE(measured->fidelity.has_value());
  const FidelityResult f = *measured->fidelity;
  const double increase = f.converted_perplexity / f.source_perplexity - 1;
  ASSERT_GT(increase, 0.0);
  // Bounds on the measured figures' good side pass.
  o.max_ppl_increase = increase * 1.01;
  o.min_top1 = f.top1_agreement * 0.99;
  o.max_kl = f.kl_mean * 1.01;
  auto loose = RunVerifyJob(o);
  ASSERT_TRUE(loose.ok()) << loose.status();
  ASSERT_EQ(loose->gates.size(), 3u);
  EXPECT_TRUE(loose->passed()) << loose->ToTable();
  EXPECT_NEAR(loose->gates[0].measured, increase, 1e-12);
  // One bound on the wrong side of its figure fails the verdict, and only that
  // gate.
  o.min_top1 = std::min(1.0, f.top1_agreement + 0.01);
  auto tight = RunVerifyJob(o);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_FALSE(tight->passed());
  EXPECT_TRUE(tight->gates[0].passed());
  EXPECT_FALSE(tight->gates[1].passed());
  EXPECT_TRUE(tight->gates[2].passed());
  EXPECT_THAT(tight->ToTable(), ::testing::HasSubstr("top-1 agreement"));
  EXPECT_THAT(tight->ToTable(), ::testing::HasSubstr("FAIL"));
  EXPECT_THAT(
      tight->ToJUnit(),
      ::testing::HasSubstr("classname=\"lrkv.quality\" name=\"min_top1\""));
  EXPECT_EQ(tight->ToJson()["gates"][1]["passed"], false);
  auto back = VerifyReportFromJson(tight->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->passed());
  EXPECT_EQ(back->ToTable(), tight->ToTable());
  // Gates need what they measure.
  o.source.clear();
  EXPECT_EQ(RunVerifyJob(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(VerifyJobTest, ARequiredModeThatDoesNotApplyFailsTheGate) {
  const std::string dir =
      Save("verify_free",
           Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kReconstruct));
  VerifyJobOptions o;
  o.checkpoint = dir;
  o.modes = {"reconstruct", "plane"};
  o.prompt_tokens = 8;
  o.decode_tokens = 4;
  auto r = RunVerifyJob(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->passed());
  EXPECT_TRUE(r->equivalence[0].passed());
  EXPECT_FALSE(r->equivalence[1].passed());
  EXPECT_THAT(r->ToJUnit(), ::testing::HasSubstr("failures=\"1\""));
  auto back = VerifyReportFromJson(r->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToTable(), r->ToTable());
  EXPECT_EQ(back->ToJUnit(), r->ToJUnit());
  // A source without --text: the report says why fidelity is missing.
  o.source = testing::StoriesModelPath();
  auto with_source = RunVerifyJob(o);
  ASSERT_TRUE(with_source.ok()) << with_source.status();
  EXPECT_FALSE(with_source->fidelity.has_value());
  EXPECT_THAT(with_source->ToTable(),
              ::testing::HasSubstr("not measured: no --text given"));
  o.source.clear();
  o.modes = {"sideways"};
  EXPECT_EQ(RunVerifyJob(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.modes = {"all"};
  o.dtype = "fp8";
  EXPECT_EQ(RunVerifyJob(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The verdict words: the naive control is confirmed under "all" (exit 0), but
// asked for by name it answers whether naive decoding is exact: it is not.
TEST_F(VerifyJobTest, NaiveByNameFailsAndUnderAllIsAConfirmedControl) {
  const std::string dir =
      Save("verify_naive",
           Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane));
  VerifyJobOptions o = Short(dir, 12, 4);
  o.modes = {"naive"};
  auto named = RunVerifyJob(o);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_FALSE(named->passed());
  const std::string table = named->ToTable();
  EXPECT_THAT(table, ::testing::HasSubstr("NOT EQUIVALENT"));
  EXPECT_THAT(table, ::testing::HasSubstr("verdict: FAIL"));
  // The failure says what was measured, the bound and the rule.
  const std::string junit = named->ToJUnit();
  EXPECT_THAT(junit, ::testing::HasSubstr("bound"));
  EXPECT_THAT(junit, ::testing::HasSubstr("rule:"));
  o.modes = {"all"};
  auto all = RunVerifyJob(o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->passed()) << all->ToTable();
  EXPECT_THAT(all->ToTable(),
              ::testing::HasSubstr("expected NOT EQUIVALENT: confirmed"));
  const nlohmann::json json = all->ToJson();
  ASSERT_GE(json["equivalence"].size(), 4u) << json.dump();
  EXPECT_EQ(json["equivalence"][3]["verdict"],
            "expected NOT EQUIVALENT: confirmed");
  // n/a (partial mode on a plane model) is reported as n/a, never as a pass.
  const auto& partial = json["equivalence"][2];
  EXPECT_EQ(partial["verdict"], "n/a");
  for (absl::string_view line : absl::StrSplit(all->ToTable(), '\n')) {
    if (absl::StartsWith(line, "partial")) {
      EXPECT_THAT(std::string(line),
                  ::testing::Not(::testing::HasSubstr("pass")));
    }
  }
}

// NaN embeddings: every comparison is NaN, which compares false; the check
// must fail at the first step instead of reading "max rel 0".
TEST_F(VerifyJobTest, NonFiniteOutputsFailAtTheFirstStep) {
  Model m = Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane);
  m.weights.embed =
      m.weights.embed.clone().fill_(std::numeric_limits<float>::quiet_NaN());
  if (m.config.tie_word_embeddings) m.weights.lm_head = m.weights.embed;
  const EquivalenceResult r = Check(m, DecodeMode::kPlane, at::kFloat);
  ASSERT_TRUE(r.applicable);
  EXPECT_TRUE(r.non_finite);
  EXPECT_FALSE(r.equivalent);
  EXPECT_EQ(r.first_bad_step, 0);
}

// The same model on disk is refused at load, naming the tensor.
TEST_F(VerifyJobTest, NonFiniteWeightsAreRefusedAtLoadNamingTheTensor) {
  Model m = Convert(Stories(), KvVariant::kLrkv, 2, RopeMode::kPlane);
  m.weights.layers[1].w_up = m.weights.layers[1].w_up.clone();
  m.weights.layers[1].w_up[3][5] = std::numeric_limits<float>::infinity();
  VerifyJobOptions o;
  o.checkpoint = Save("verify_inf", m);
  auto r = RunVerifyJob(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(r.status().message()),
      ::testing::HasSubstr(
          "'model.layers.1.mlp.up_proj.weight' holds 0 NaN and 1 infinite"));
}

// A reconstruct-mode conversion keeps whole per-head K bias deltas: at r = 0
// there is no latent to carry them, so plane decoding cannot represent the
// model and must say so (n/a) rather than run and fail, or drop them.
TEST(Equivalence, PlaneIsNotApplicableWhereKBiasDeltasLieOffThePlanes) {
  Model src = RandomQkNorm(32);
  src.config.qkv_bias = true;
  src.weights = RandomLlamaWeights(src.config, 5);
  for (int64_t rank : {0, 8}) {
    const Model free =
        Convert(src, KvVariant::kLrkv, rank, RopeMode::kReconstruct);
    const EquivalenceResult r = Check(free, DecodeMode::kPlane, at::kFloat);
    EXPECT_FALSE(r.applicable) << rank;
    EXPECT_THAT(r.reason, ::testing::HasSubstr(rank == 0 ? "K bias deltas"
                                                         : "RoPE planes"));
    ExpectExact(free, DecodeMode::kReconstruct);
  }
  ExpectExact(Convert(src, KvVariant::kLrkv, 0, RopeMode::kPlane),
              DecodeMode::kPlane);
}

// The activation-metric conversion that read FAIL at 1.15e-5 under the old
// fixed 1e-5: every exact mode EQUIVALENT in both dtypes.
TEST_F(VerifyJobTest, ActivationMetricPlaneConversionVerifies) {
  const auto dir = testing::FreshTempDir("verify_activation");
  ConvertJobOptions c;
  c.checkpoint = testing::StoriesModelPath();
  c.out_dir = (dir / "out").string();
  c.conversion.variant = KvVariant::kLrkv;
  c.conversion.rank = 2;
  c.rope_mode = RopeMode::kPlane;
  c.conversion.metric = SurgeryMetric::kActivation;
  c.calib_path = testing::StoriesTextPath();
  c.calib_range = {0, 0.8};
  ASSERT_TRUE(RunConvertJob(c).ok());
  VerifyJobOptions o;
  o.checkpoint = c.out_dir;
  o.dtype = "both";
  auto r = RunVerifyJob(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->passed()) << r->ToTable();
  for (const auto& e : r->equivalence) {
    if (e.applicable && e.expected_equivalent)
      EXPECT_LE(e.ratio, 1.0) << e.mode << e.dtype;
  }
}

// Prefill (one GEMM per layer over the tokens, then the cache position by
// position) and single steps compute the same decode: for every engine, the
// logits after a 20-token prefill and 5 steps are within the error model's
// bound of the float64 expanded engine stepped 25 times (2x the step-by-step
// engine's own error plus twice fp32 rounding of the reference), and the same
// greedy tokens follow.
TEST(DecodeEngine, PrefillDecodesAsSingleStepsDo) {
  const Model source = Stories();
  const Model lrkv = Convert(source, KvVariant::kLrkv, 2, RopeMode::kPlane);
  const Model mla =
      Convert(source, KvVariant::kMla, 24, RopeMode::kReconstruct);
  // QK-norm (σ per KV head in the factored cache) and a partial-RoPE conversion
  // too.
  const Model qk = RandomQkNorm();
  const Model qk_plane = Convert(qk, KvVariant::kLrkv, 8, RopeMode::kPlane);
  const Model qk_partial = Convert(qk, KvVariant::kLrkv, 8, RopeMode::kPartial);
  const Model mla_partial =
      Convert(source, KvVariant::kMla, 24, RopeMode::kPartial);
  const Model shared_plane =
      Convert(source, KvVariant::kLrkv, 2, RopeMode::kSharedPlane);
  struct Case {
    const Model* m;
    DecodeMode mode;
  } cases[] = {{&source, DecodeMode::kExpanded},
               {&lrkv, DecodeMode::kPlane},
               {&lrkv, DecodeMode::kReconstruct},
               {&mla, DecodeMode::kReconstruct},
               {&qk_plane, DecodeMode::kPlane},
               {&qk_plane, DecodeMode::kReconstruct},
               {&qk_partial, DecodeMode::kPartial},
               {&mla_partial, DecodeMode::kPartial},
               {&shared_plane, DecodeMode::kSharedPlane}};
  at::NoGradGuard no_grad;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(DecodeModeName(c.mode),
                              c.m->config.qk_norm ? " qk-norm" : ""));
    std::vector<int64_t> ids = {1};
    for (int i = 0; i < 24; ++i)
      ids.push_back(3 + (i * 37) % (c.m->config.vocab_size - 3));
    EngineOptions eo;
    eo.capacity = 8;  // grown on the way (prefill reserves its span at once)
    auto prefilled = CreateDecodeEngine(c.m->config, c.m->weights, c.mode, eo);
    auto stepped = CreateDecodeEngine(c.m->config, c.m->weights, c.mode, eo);
    EngineOptions f64 = eo;
    f64.cache_dtype = at::kDouble;
    f64.materialize = true;
    auto truth =
        CreateDecodeEngine(c.m->config, ForCompute(c.m->weights, at::kDouble),
                           DecodeMode::kExpanded, f64);
    ASSERT_TRUE(prefilled.ok() && stepped.ok() && truth.ok());
    const auto all = at::tensor(ids, at::kLong);
    at::Tensor a = (*prefilled)->Prefill(all.narrow(0, 0, 20));
    at::Tensor b, t;
    for (int64_t i = 0; i < 20; ++i) {
      b = (*stepped)->Step(all.narrow(0, i, 1));
      t = (*truth)->Step(all.narrow(0, i, 1));
    }
    EXPECT_EQ((*prefilled)->length(), 20);
    for (int64_t i = 20; i <= 25; ++i) {
      const double e_prefill =
          (a.to(at::kDouble) - t).pow(2).mean().sqrt().item<double>();
      const double e_step =
          (b.to(at::kDouble) - t).pow(2).mean().sqrt().item<double>();
      const double rms = t.pow(2).mean().sqrt().item<double>();
      EXPECT_LE(e_prefill, 2 * e_step + 2 * 0x1p-24 * rms) << "step " << i;
      EXPECT_EQ(a.argmax(-1).item<int64_t>(), t.argmax(-1).item<int64_t>())
          << "step " << i;
      if (i == 25) break;
      const auto token = all.narrow(0, i, 1);
      a = (*prefilled)->Step(token);
      b = (*stepped)->Step(token);
      t = (*truth)->Step(token);
    }
  }
}

}  // namespace
}  // namespace lrkv
