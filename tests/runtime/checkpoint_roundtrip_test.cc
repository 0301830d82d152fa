// Saving and loading checkpoints: bit-exact safetensors round trip, the two RoPE
// layouts computing the same function, GGUF -> safetensors export, F16/BF16 weights,
// and clear errors for checkpoints that do not match their config.
#include <filesystem>
#include <fstream>

#include "formats/safetensors.h"
#include "formats/text_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "runtime/language_model.h"
#include "runtime/llama_weights.h"
#include "runtime/transformer.h"
#include "tests/model_test_util.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::MaxRelError;

at::Tensor Logits(const ModelConfig& c, LlamaWeights w, const at::Tensor& tokens) {
  auto t = Transformer::Create(c, std::move(w));
  EXPECT_TRUE(t.ok()) << t.status();
  at::NoGradGuard no_grad;
  return (*t)->Forward(tokens);
}

TEST(CheckpointRoundTrip, GqaQkNormModelIsBitExact) {
  ModelConfig c = testing::SmallConfig();
  c.qk_norm = true;
  c.model_type = "qwen3";
  const LlamaWeights w = RandomLlamaWeights(c, 11);
  const fs::path dir = testing::FreshTempDir("roundtrip");
  ASSERT_TRUE(SaveSafetensorsCheckpoint(dir.string(), c, w, nullptr).ok());
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->config().qk_norm);
  EXPECT_EQ((*ckpt)->config().num_kv_heads, 2);
  auto loaded = LoadLlamaWeights(**ckpt);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->layers.size(), w.layers.size());
  EXPECT_TRUE(at::equal(loaded->embed, w.embed));
  EXPECT_TRUE(at::equal(loaded->lm_head, w.lm_head));
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto &a = loaded->layers[i], &b = w.layers[i];
    for (auto [x, y] : {std::pair{a.wq, b.wq}, {a.wk, b.wk}, {a.wv, b.wv}, {a.wo, b.wo},
                        {a.q_norm, b.q_norm}, {a.k_norm, b.k_norm}, {a.w_gate, b.w_gate},
                        {a.w_up, b.w_up}, {a.w_down, b.w_down}, {a.attn_norm, b.attn_norm},
                        {a.ffn_norm, b.ffn_norm}}) {
      EXPECT_TRUE(at::equal(x, y)) << "layer " << i;
    }
  }
  const auto tokens = at::randint(0, c.vocab_size, {1, 20}, at::kLong);
  EXPECT_TRUE(at::equal(Logits(c, w, tokens), Logits((*ckpt)->config(), *loaded, tokens)));
}

TEST(CheckpointRoundTrip, RopeLayoutsComputeTheSameFunction) {
  for (bool qk_norm : {false, true}) {
    ModelConfig c = testing::SmallConfig();
    c.qk_norm = qk_norm;
    c.qkv_bias = true;
    c.rope_layout = RopeLayout::kAdjacent;
    const LlamaWeights adjacent = RandomLlamaWeights(c, 3);
    ModelConfig c2 = c;
    LlamaWeights half = adjacent;
    PermuteRopeLayout(&c2, &half, RopeLayout::kHalfSplit);
    ASSERT_EQ(c2.rope_layout, RopeLayout::kHalfSplit);
    const auto tokens = at::randint(0, c.vocab_size, {2, 33}, at::kLong);
    const auto ref = Logits(c, adjacent, tokens);
    EXPECT_LE(MaxRelError(Logits(c2, half, tokens), ref), 1e-5);
    // The permuted weights in the wrong layout give a different function.
    EXPECT_GT(MaxRelError(Logits(c, half, tokens), ref), 1e-3);
    // And permuting back restores the original weights exactly.
    PermuteRopeLayout(&c2, &half, RopeLayout::kAdjacent);
    EXPECT_TRUE(at::equal(half.layers[0].wq, adjacent.layers[0].wq));
  }
}

TEST(CheckpointRoundTrip, StoriesGgufExportsToSafetensorsWithTheSamePerplexity) {
  auto gguf = LanguageModel::Load(testing::StoriesModelPath());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  auto w = LoadLlamaWeights(**ckpt);
  ASSERT_TRUE(w.ok());
  const fs::path dir = testing::FreshTempDir("stories_export");
  ASSERT_TRUE(SaveSafetensorsCheckpoint(dir.string(), (*ckpt)->config(), *w,
                                        (*ckpt)->tokenizer())
                  .ok());
  auto st = LanguageModel::Load(dir.string());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)->config().rope_layout, RopeLayout::kHalfSplit);
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok());
  std::vector<std::string> some(docs->begin(), docs->begin() + 20);
  auto a = (*gguf)->Perplexity(some), b = (*st)->Perplexity(some);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_NEAR(a->perplexity, b->perplexity, 1e-5 * a->perplexity);
  auto ga = (*gguf)->Generate("Once upon a time", 16);
  auto gb = (*st)->Generate("Once upon a time", 16);
  EXPECT_EQ(ga->new_ids, gb->new_ids);
}

TEST(CheckpointRoundTrip, HalfPrecisionWeightsLoadAsTheirFloatValues) {
  ModelConfig c = testing::SmallConfig();
  c.num_layers = 1;
  const LlamaWeights w = RandomLlamaWeights(c, 5);
  const fs::path dir = testing::FreshTempDir("bf16");
  ASSERT_TRUE(SaveSafetensorsCheckpoint(dir.string(), c, w, nullptr).ok());
  // Rewrite the embedding and q_proj in BF16 and every other tensor in F16.
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok());
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorView> views;
  for (const auto& t : (*ckpt)->tensors()) {
    const bool bf16 = t.name.find("embed") != std::string::npos ||
                      t.name.find("q_proj") != std::string::npos;
    const float* src = reinterpret_cast<const float*>(t.data);
    std::vector<uint8_t> bytes(t.numel() * 2);
    for (int64_t k = 0; k < t.numel(); ++k) {
      const uint16_t h = bf16 ? FloatToBFloat16(src[k]) : FloatToHalf(src[k]);
      std::memcpy(bytes.data() + 2 * k, &h, 2);
    }
    storage.push_back(std::move(bytes));
    TensorView v = t;
    v.dtype = bf16 ? DType::kBF16 : DType::kF16;
    v.data = storage.back().data();
    v.nbytes = storage.back().size();
    views.push_back(v);
  }
  const fs::path half_dir = testing::FreshTempDir("bf16_out");
  fs::copy_file(dir / "config.json", half_dir / "config.json");
  ASSERT_TRUE(WriteSafetensors((half_dir / "model.safetensors").string(), views, {}).ok());
  auto half = Checkpoint::Open(half_dir.string());
  ASSERT_TRUE(half.ok()) << half.status();
  auto loaded = LoadLlamaWeights(**half);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(at::allclose(loaded->embed, w.embed, 1e-2, 1e-3));
  EXPECT_FALSE(at::equal(loaded->embed, w.embed));
  // Our conversions agree with LibTorch's round-to-nearest-even casts.
  EXPECT_TRUE(at::equal(loaded->embed, w.embed.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_TRUE(at::equal(loaded->layers[0].wq, w.layers[0].wq.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_TRUE(at::equal(loaded->layers[0].wk, w.layers[0].wk.to(at::kHalf).to(at::kFloat)));
}

// Weights kept in their stored dtype are views of the mapped file (no copy), outlive
// the Checkpoint object that opened it, and compute exactly what the float32 copies
// compute (each weight is widened exactly on use). A sharded bf16 save reads back to
// the same values; NaN in a bf16 view is still refused naming the tensor.
TEST(CheckpointRoundTrip, StoredDtypeWeightsAreMappedViewsThatComputeTheSame) {
  ModelConfig c = testing::SmallConfig();
  c.qk_norm = true;
  c.model_type = "qwen3";
  const LlamaWeights w = RandomLlamaWeights(c, 12);
  const fs::path dir = testing::FreshTempDir("stored_dtype");
  // ~20 KB shards: the small model is split across several files.
  ASSERT_TRUE(SaveSafetensorsCheckpoint(dir.string(), c, w, nullptr, DType::kBF16, 20'000).ok());
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00007.safetensors"));
  auto opened = Checkpoint::Open(dir.string());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const Checkpoint> ckpt = std::move(*opened);
  auto copies = LoadLlamaWeights(*ckpt);
  ASSERT_TRUE(copies.ok()) << copies.status();
  const WeightLoadOptions options = StoredDtype();
  auto views = LoadLlamaWeights(ckpt, options);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(views->layers[0].w_up.scalar_type(), at::kBFloat16);
  EXPECT_EQ(views->layers[0].w_up.data_ptr(),
            static_cast<const void*>(ckpt->Find("model.layers.0.mlp.up_proj.weight")->data));
  EXPECT_EQ(StoredMatrixDType(*views), DType::kBF16);
  EXPECT_TRUE(at::equal(views->layers[1].wk.to(at::kFloat), w.layers[1].wk.to(at::kBFloat16).to(at::kFloat)));
  const ModelConfig config = ckpt->config();
  ckpt.reset();  // the views keep the mapping alive
  const auto tokens = at::randint(0, c.vocab_size, {2, 9}, at::kLong);
  EXPECT_TRUE(at::equal(Logits(config, *views, tokens), Logits(config, *copies, tokens)));
  // Non-finite values in a bf16 view: refused at load, naming the tensor.
  const fs::path nan_dir = testing::FreshTempDir("stored_dtype_nan");
  LlamaWeights bad = w;
  bad.layers[1].w_gate = w.layers[1].w_gate.clone();
  bad.layers[1].w_gate[3][4] = std::numeric_limits<float>::quiet_NaN();
  bad.layers[1].w_gate[5][6] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(SaveSafetensorsCheckpoint(nan_dir.string(), c, bad, nullptr, DType::kBF16).ok());
  auto nan_ckpt = Checkpoint::Open(nan_dir.string());
  ASSERT_TRUE(nan_ckpt.ok());
  auto refused = LoadLlamaWeights(std::shared_ptr<const Checkpoint>(std::move(*nan_ckpt)), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("'model.layers.1.mlp.gate_proj.weight' holds 1 NaN and 1 infinite"));
}

TEST(CheckpointRoundTrip, MismatchedCheckpointsAreRejectedNamingTheTensor) {
  ModelConfig c = testing::SmallConfig();
  c.num_layers = 1;
  const LlamaWeights w = RandomLlamaWeights(c, 5);
  const fs::path dir = testing::FreshTempDir("mismatch");
  ASSERT_TRUE(SaveSafetensorsCheckpoint(dir.string(), c, w, nullptr).ok());
  auto rewrite_config = [&](const std::string& from, const std::string& to) {
    std::ifstream in(dir / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.find(from), from.size(), to);
    std::ofstream(dir / "config.json") << text;
  };
  rewrite_config("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok());
  auto loaded = LoadLlamaWeights(**ckpt);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("'model.layers.0.self_attn.k_proj.weight' has shape [32, 48], "
                        "expected [48, 48]"));
  rewrite_config("\"num_key_value_heads\": 3", "\"num_key_value_heads\": 2");
  rewrite_config("\"num_hidden_layers\": 1", "\"num_hidden_layers\": 2");
  ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_THAT(std::string(LoadLlamaWeights(**ckpt).status().message()),
              HasSubstr("missing tensor 'model.layers.1.input_layernorm.weight'"));
  rewrite_config("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
  rewrite_config("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
  ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok());
  // With tied embeddings a stored lm_head is tolerated (some exporters keep it).
  EXPECT_TRUE(LoadLlamaWeights(**ckpt).ok());
  // A model directory without a tokenizer cannot be evaluated on text.
  auto lm = LanguageModel::Load(dir.string());
  EXPECT_EQ(lm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(lm.status().message()), HasSubstr("no tokenizer"));
}

}  // namespace
}  // namespace lrkv
