// MLA with a latent norm (DeepSeek-V3's kv_a_layernorm): the fit of its weight
// γ (surgery/latent_norm_fit.h), conversions to it, and its exports as stock
// DeepSeek-V3 safetensors and llama.cpp deepseek2 GGUF read back as the same
// model.
#include <cmath>
#include <filesystem>

#include "exports/gguf_export.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "surgery/convert_job.h"
#include "surgery/kv_scheme.h"
#include "surgery/latent_norm_fit.h"
#include "tests/surgery/surgery_test_util.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using testing::MaxRelError;

// Σ_t ‖U c_t − U'(γ ⊙ c'_t / s'_t)‖² over the rows of x [n, d] with t % 4 ==
// `rows` (-1: all), c = down·x, c' = down'·x: the error the fitted norm adds,
// computed token by token in float64, without the fit's algebra. The fit
// with down' = down, up' = up is γ alone in the factorisation's basis.
double NormObjective(const at::Tensor& x, const at::Tensor& down,
                     const at::Tensor& up, const LatentNormFit& fit, double eps,
                     int rows = -1) {
  const auto d64 = down.to(at::kDouble), u64 = up.to(at::kDouble),
             fd64 = fit.kv_down.to(at::kDouble), fu64 = fit.up.to(at::kDouble),
             g64 = fit.gamma.to(at::kDouble);
  double total = 0;
  for (int64_t t = 0; t < x.size(0); ++t) {
    if (rows >= 0 && t % 4 != rows) continue;
    const auto xt = x[t].to(at::kDouble);
    const auto c = at::matmul(d64, xt), cf = at::matmul(fd64, xt);
    const auto s = std::sqrt(cf.pow(2).mean().item<double>() + eps);
    total += (at::matmul(u64, c) - at::matmul(fu64, g64 * cf / s))
                 .pow(2)
                 .sum()
                 .item<double>();
  }
  return total;
}

// Σ_t ‖U c_t‖² over the same rows: the objective's reference.
double LatentEnergy(const at::Tensor& x, const at::Tensor& down,
                    const at::Tensor& up, int rows) {
  LatentNormFit none;
  none.kv_down = down;
  none.up = up;
  none.gamma = at::zeros({down.size(0)});
  return NormObjective(x, down, up, none, 0.0, rows);
}

struct FitProblem {
  at::Tensor down, up, x;
};

// Inputs whose scale varies by token (RMSNorm outputs do not have one RMS
// through a projection), latent 16 of d = 32.
FitProblem RandomProblem() {
  at::manual_seed(11);
  FitProblem p;
  p.down = at::randn({16, 32}, at::kFloat) / 6;
  p.up = at::randn({48, 16}, at::kFloat);
  p.x = at::randn({1024, 32}, at::kFloat) *
        (0.5 + 1.5 * at::rand({1024, 1}, at::kFloat));
  return p;
}

TEST(LatentNorm, ReportedErrorIsTheFittedModelsOnHeldOutSamples) {
  const FitProblem p = RandomProblem();
  const double eps = 1e-6;
  const LatentNormFit fit = FitLatentNorm(p.down, p.up, p.x, at::Tensor(), eps);
  ASSERT_EQ(fit.gamma.size(0), 16);
  ASSERT_EQ(fit.kv_down.sizes(), p.down.sizes());
  ASSERT_EQ(fit.up.sizes(), p.up.sizes());
  EXPECT_EQ(fit.samples, 1024);
  // Every fourth sample (t % 4 == 3) is held out of the fit and judges it.
  const double ref = LatentEnergy(p.x, p.down, p.up, 3);
  const double held = NormObjective(p.x, p.down, p.up, fit, eps, 3);
  EXPECT_NEAR(fit.rel_error, std::sqrt(held / ref), 1e-5 * fit.rel_error);
  EXPECT_GT(fit.rel_error, 1e-3);  // the scales vary: no fit is exact
  // γ alone in the factorisation's basis does worse on the same samples: the
  // refit of the up-projections (or the whitened basis) is what the fit chose.
  EXPECT_LT(fit.rel_error, fit.plain_rel_error);
  EXPECT_TRUE(fit.refitted || fit.whitened);
  // Without inputs there is nothing to hold out: no error is reported.
  const LatentNormFit blind =
      FitLatentNorm(p.down, p.up, at::Tensor(), at::Tensor(), eps);
  EXPECT_TRUE(std::isnan(blind.rel_error));
  EXPECT_GT(NormObjective(p.x, p.down, p.up, blind, eps, 3), held);
}

TEST(LatentNorm, FitIsExactWhereEveryTokensLatentHasOneRms) {
  FitProblem p = RandomProblem();
  // Scale each input so that its latent's RMS is 2.5: the norm then divides
  // every token by the same 2.5, which γ = 2.5 undoes.
  const auto c = at::matmul(p.x, p.down.t());
  p.x = p.x * (2.5 / c.pow(2).mean(1, true).sqrt());
  const LatentNormFit fit = FitLatentNorm(p.down, p.up, p.x, at::Tensor(), 0.0);
  EXPECT_LT(fit.rel_error, 1e-6);
  EXPECT_LT(fit.plain_rel_error, 1e-6);
  EXPECT_LT(std::sqrt(NormObjective(p.x, p.down, p.up, fit, 0.0) /
                      LatentEnergy(p.x, p.down, p.up, -1)),
            1e-5);
}

TEST(LatentNorm, WithoutInputsTheLatentIsWhitenedForIsotropicInputs) {
  const FitProblem p = RandomProblem();
  const auto w = 0.5 + at::rand({32}, at::kFloat);
  const LatentNormFit fit = FitLatentNorm(p.down, p.up, at::Tensor(), w, 1e-6);
  EXPECT_TRUE(fit.whitened);
  EXPECT_TRUE(std::isnan(fit.rel_error));
  // A change of basis only: U'·down' = U·down.
  EXPECT_LE(
      MaxRelError(at::matmul(fit.up, fit.kv_down), at::matmul(p.up, p.down)),
      1e-5);
  // The new latent's second moment for inputs w ⊙ n, n isotropic of unit
  // RMS, is the identity, so its mean square is 1 and γ = sqrt(1 + ε).
  const auto pw = fit.kv_down.to(at::kDouble) * w.to(at::kDouble).unsqueeze(0);
  EXPECT_LE(MaxRelError(at::matmul(pw, pw.t()), at::eye(16, at::kDouble)),
            1e-5);
  EXPECT_LT((fit.gamma.to(at::kDouble) - std::sqrt(1 + 1e-6))
                .abs()
                .max()
                .item<double>(),
            1e-5);
}

ConversionOptions NormedMlaAt(int64_t latent, int64_t planes = 0) {
  ConversionOptions o = DecoupledMlaAt(latent, planes);
  o.latent_norm = true;
  return o;
}

TEST(LatentNorm, ConversionFitsGammaOnCalibrationInputsAndReportsItsError) {
  const Source s = Stories();
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok()) << docs.status();
  auto t = Transformer::Create(s.config, s.weights);
  ASSERT_TRUE(t.ok()) << t.status();
  auto calib = CollectCalibration(
      **t, *s.tokenizer, DocumentRange{0, 0.5}.Slice(*docs), 2048, {}, 256);
  ASSERT_TRUE(calib.ok()) << calib.status();
  ASSERT_EQ(calib->samples.size(), static_cast<size_t>(s.config.num_layers));
  EXPECT_EQ(calib->samples[0].size(0), 256);
  EXPECT_EQ(calib->samples[0].size(1), s.config.hidden_size);
  ConversionReport report;
  const auto m = Convert(s, NormedMlaAt(24), &*calib, &report);
  EXPECT_TRUE(m.config.kv.latent_norm);
  EXPECT_TRUE(report.latent_norm);
  for (size_t i = 0; i < m.weights.layers.size(); ++i) {
    ASSERT_TRUE(m.weights.layers[i].kv_norm.defined()) << i;
    EXPECT_EQ(m.weights.layers[i].kv_norm.size(0), 24);
    const double e = report.layers[i].latent_norm_error;
    EXPECT_TRUE(e > 0 && e < 0.5) << "layer " << i << ": " << e;
  }
  const auto json = report.ToJson();
  EXPECT_TRUE(json["latent_norm"].get<bool>());
  EXPECT_TRUE(json["layers"][0]["latent_norm_error"].is_number());
  // Only decoupled-RoPE MLA has a latent to normalise.
  ConversionOptions lrkv = LrkvAt(2);
  lrkv.latent_norm = true;
  EXPECT_EQ(MakeKvScheme(s.config, lrkv).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LatentNorm, Deepseek2GgufReadsBackAsTheSameModel) {
  const Source s = Stories();
  const auto m = Convert(s, NormedMlaAt(24, 2));
  const auto tokens = SomeTokens(s.config.vocab_size);
  const auto ref = Logits(m.config, m.weights, tokens);
  const fs::path gguf = testing::FreshTempDir("deepseek2") / "model.gguf";
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const LlamaWeights stored = MatricesIn(m.config, m.weights, dtype);
    ASSERT_TRUE(
        SaveGgufCheckpoint(gguf.string(), m.config, stored, *s.tokenizer, dtype)
            .ok());
    auto ckpt = Checkpoint::Open(gguf.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const ModelConfig& c = (*ckpt)->config();
    EXPECT_TRUE(c.deepseek_layout);
    EXPECT_TRUE(c.kv.latent_norm);
    EXPECT_EQ(c.kv.latent, 24);
    EXPECT_EQ(c.kv.RopeWidth(), 4);
    auto w = LoadLlamaWeights(**ckpt);
    ASSERT_TRUE(w.ok()) << w.status();
    const auto stored_ref = Logits(m.config, stored, tokens);
    const double back = MaxRelError(Logits(c, *w, tokens), stored_ref);
    if (dtype == DType::kF32) {
      EXPECT_LE(back, 1e-5);
      EXPECT_LE(MaxRelError(stored_ref, ref), 1e-6);
    } else {
      // attn_q carries the score scale sqrt((d_h + d_rope)/d_h), so its
      // half-precision weights are rounded once more: an error no larger than
      // the first rounding of every matrix.
      EXPECT_LE(back, MaxRelError(stored_ref, ref));
    }
  }
  // What deepseek2 cannot run is refused before a byte is written.
  const auto without = Convert(s, DecoupledMlaAt(24, 2));
  EXPECT_EQ(CheckGgufExportable(without.config).code(),
            absl::StatusCode::kInvalidArgument);
  ModelConfig biased = m.config;
  biased.qkv_bias = true;
  EXPECT_EQ(CheckGgufExportable(biased).code(),
            absl::StatusCode::kInvalidArgument);
}

// The job's defaults: a DeepSeek format makes MLA decoupled with the norm;
// turning the norm off there is refused up front, nothing written.
TEST(LatentNorm, DeepseekFormatsDefaultToTheNormAndRefuseItsAbsence) {
  ConvertJobOptions o;
  o.checkpoint = testing::StoriesModelPath();
  o.conversion.variant = KvVariant::kMla;
  o.conversion.budget = 0.5;
  for (const char* format : {"gguf", "deepseek"}) {
    o.format = format;
    const ConvertJobOptions resolved = WithAutoResolved(o);
    EXPECT_EQ(resolved.conversion.rope_mode, RopeMode::kPartial) << format;
    EXPECT_TRUE(resolved.conversion.latent_norm) << format;
  }
  o.format = "safetensors";
  EXPECT_FALSE(WithAutoResolved(o).conversion.latent_norm);
  o.format = "deepseek";
  o.latent_norm = false;
  o.out_dir = (testing::FreshTempDir("ds_refused") / "out").string();
  EXPECT_EQ(RunConvertJob(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(o.out_dir));
}

}  // namespace
}  // namespace lrkv
