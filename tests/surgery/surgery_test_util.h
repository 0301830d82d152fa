// Helpers of the surgery tests: the stories260K source, random sources, logits
// of a model, conversions with given options.
#ifndef LRKV_TESTS_SURGERY_SURGERY_TEST_UTIL_H_
#define LRKV_TESTS_SURGERY_SURGERY_TEST_UTIL_H_

#include <optional>
#include <utility>

#include "formats/text_corpus.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "runtime/llama_weights.h"
#include "runtime/transformer.h"
#include "surgery/calibration.h"
#include "surgery/converter.h"
#include "tests/model_test_util.h"
#include "tests/test_paths.h"

namespace lrkv {

struct Source {
  ModelConfig config;
  LlamaWeights weights;
  std::optional<Tokenizer> tokenizer;
};

inline Source Stories() {
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LoadLlamaWeights(**ckpt);
  EXPECT_TRUE(w.ok()) << w.status();
  return {(*ckpt)->config(), std::move(*w), *(*ckpt)->tokenizer()};
}

// A random MHA model with d_h = 64.
inline Source RandomMha(bool qk_norm = false) {
  ModelConfig c = testing::SmallConfig();
  c.hidden_size = 128;
  c.num_heads = c.num_kv_heads = 4;
  c.head_dim = c.rope_dim = 64;
  c.qk_norm = qk_norm;
  return {c, RandomLlamaWeights(c, 21), std::nullopt};
}

inline at::Tensor Logits(const ModelConfig& c, const LlamaWeights& w,
                         const at::Tensor& tokens) {
  auto t = Transformer::Create(c, w);
  EXPECT_TRUE(t.ok()) << t.status();
  at::NoGradGuard no_grad;
  return (*t)->Forward(tokens);
}

inline at::Tensor SomeTokens(int64_t vocab, int64_t n = 48) {
  return at::randint(1, vocab, {2, n}, at::kLong);
}

inline CalibrationStats Calibrate(const Source& s, double from, double to) {
  auto docs = ReadDocuments(testing::StoriesTextPath());
  EXPECT_TRUE(docs.ok());
  DocumentRange range{from, to};
  auto t = Transformer::Create(s.config, s.weights);
  auto stats = CollectCalibration(**t, *s.tokenizer, range.Slice(*docs), 4096);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return std::move(*stats);
}

inline ConvertedModel Convert(const Source& s, ConversionOptions o,
                              const CalibrationStats* calib = nullptr,
                              ConversionReport* report = nullptr) {
  auto out = ConvertModel(s.config, s.weights, o, calib, report);
  EXPECT_TRUE(out.ok()) << out.status();
  return std::move(*out);
}

inline ConversionOptions LrkvAt(int64_t r,
                                RopeMode mode = RopeMode::kReconstruct) {
  ConversionOptions o;
  o.variant = KvVariant::kLrkv;
  o.rank = r;
  o.rope_mode = mode;
  return o;
}

// MLA with decoupled RoPE at latent d_c, keeping `planes` RoPE planes (0: the
// default, every plane).
inline ConversionOptions DecoupledMlaAt(int64_t latent, int64_t planes = 0) {
  ConversionOptions o;
  o.variant = KvVariant::kMla;
  o.rope_mode = RopeMode::kPartial;
  if (planes > 0) o.rope_planes_kept = planes;
  o.latent = latent;
  return o;
}

}  // namespace lrkv

#endif  // LRKV_TESTS_SURGERY_SURGERY_TEST_UTIL_H_
