// Helpers shared by the LibTorch-based model tests.
#ifndef LRKV_TESTS_MODEL_TEST_UTIL_H_
#define LRKV_TESTS_MODEL_TEST_UTIL_H_

#include <ATen/ATen.h>

#include <utility>

#include "formats/config.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "runtime/llama_weights.h"
#include "tests/test_paths.h"

namespace lrkv::testing {

// max|a - ref| / max|ref|: the relative error measure of docs/design.md, "The
// math that must hold".
inline double MaxRelError(const at::Tensor& a, const at::Tensor& ref) {
  return (a - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

// A small Llama with GQA; callers switch features on.
inline ModelConfig SmallConfig() {
  ModelConfig c;
  c.hidden_size = 48;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.vocab_size = 97;
  c.rope_theta = 10000;
  c.rms_norm_eps = 1e-5;
  return c;
}

// The shared stories260K model: its config and weights.
struct StoriesModel {
  ModelConfig config;
  LlamaWeights weights;
};

inline StoriesModel LoadStories() {
  auto ckpt = Checkpoint::Open(StoriesModelPath());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LoadLlamaWeights(**ckpt);
  EXPECT_TRUE(w.ok()) << w.status();
  return {(*ckpt)->config(), std::move(*w)};
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_MODEL_TEST_UTIL_H_
