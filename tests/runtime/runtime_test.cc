// The LibTorch runtime on the real stories260K model and on random models: full
// forward equals incremental decoding, greedy generation, perplexity.
#include <cctype>
#include <cstring>
#include <fstream>
#include <iostream>

#include "formats/text_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "runtime/language_model.h"
#include "runtime/layers.h"
#include "runtime/llama_weights.h"
#include "runtime/perplexity.h"
#include "runtime/stored_linear.h"
#include "runtime/transformer.h"
#include "tests/model_test_util.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using testing::MaxRelError;

std::unique_ptr<Transformer> LoadStories() {
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LoadLlamaWeights(**ckpt);
  EXPECT_TRUE(w.ok()) << w.status();
  auto t = Transformer::Create((*ckpt)->config(), std::move(*w));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

// Feeds `tokens` [1, T] one token at a time (after an optional prefill chunk) and
// returns the stacked logits [1, T, V].
at::Tensor DecodeIncrementally(const Transformer& t, const at::Tensor& tokens,
                               int64_t prefill, int64_t capacity) {
  KVCache cache = t.NewCache(tokens.size(0), capacity);
  std::vector<at::Tensor> steps;
  if (prefill > 0) steps.push_back(t.ForwardCached(cache, tokens.narrow(1, 0, prefill)));
  for (int64_t i = prefill; i < tokens.size(1); ++i) {
    steps.push_back(t.ForwardCached(cache, tokens.narrow(1, i, 1)));
  }
  EXPECT_EQ(cache.length, tokens.size(1));
  return at::cat(steps, 1);
}

TEST(Runtime, StoriesFullForwardEqualsIncrementalDecode) {
  auto model = LoadStories();
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok());
  std::vector<int64_t> ids = {1};
  for (int32_t id : (*ckpt)->tokenizer()->Encode((*docs)[1])) ids.push_back(id);
  ASSERT_GE(ids.size(), 80u);
  ids.resize(80);
  at::NoGradGuard no_grad;
  const auto tokens = at::tensor(ids, at::kLong).unsqueeze(0);
  const auto full = model->Forward(tokens);
  // Capacity 16 forces the cache to grow several times on the way.
  const auto steps = DecodeIncrementally(*model, tokens, 0, 16);
  EXPECT_LE(MaxRelError(steps, full), 1e-5);
  const auto chunked = DecodeIncrementally(*model, tokens, 33, 80);
  EXPECT_LE(MaxRelError(chunked, full), 1e-5);
  // The check can fail: a model without the cache's earlier positions differs.
  const auto truncated = model->Forward(tokens.narrow(1, 40, 40));
  EXPECT_GT(MaxRelError(truncated, full.narrow(1, 40, 40)), 1e-2);
}

TEST(Runtime, RandomModelWithQkNormBiasAndPartialRopeDecodesIncrementally) {
  ModelConfig c = testing::SmallConfig();
  c.qk_norm = true;
  c.qkv_bias = true;
  c.rope_dim = 12;
  c.tie_word_embeddings = true;
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kAdjacent}) {
    c.rope_layout = layout;
    auto t = Transformer::Create(c, RandomLlamaWeights(c, 7));
    ASSERT_TRUE(t.ok()) << t.status();
    at::NoGradGuard no_grad;
    const auto tokens = at::randint(0, c.vocab_size, {2, 70}, at::kLong);
    const auto full = (*t)->Forward(tokens);
    EXPECT_LE(MaxRelError(DecodeIncrementally(**t, tokens, 5, 8), full), 1e-5);
  }
}

TEST(Runtime, StoriesGreedyGenerationIsEnglish) {
  auto model = LanguageModel::Load(testing::StoriesModelPath());
  ASSERT_TRUE(model.ok()) << model.status();
  auto r = (*model)->Generate("Once upon a time", 16);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->new_ids.size(), 16u);
  const std::string& text = r->continuation;
  ASSERT_FALSE(text.empty());
  int letters = 0, spaces = 0;
  for (unsigned char ch : text) {
    ASSERT_LT(ch, 0x80) << text;  // plain ASCII English
    letters += std::isalpha(ch) != 0;
    spaces += ch == ' ';
  }
  EXPECT_GE(letters, 20) << text;
  EXPECT_GE(spaces, 4) << text;
  // Greedy decoding through the cache agrees with argmax of the full forward.
  std::vector<int64_t> all(r->prompt_ids.begin(), r->prompt_ids.end());
  all.insert(all.end(), r->new_ids.begin(), r->new_ids.end());
  at::NoGradGuard no_grad;
  const auto logits =
      (*model)->transformer().Forward(at::tensor(all, at::kLong).unsqueeze(0))[0];
  const int64_t p = static_cast<int64_t>(r->prompt_ids.size());
  for (size_t i = 0; i < r->new_ids.size(); ++i) {
    EXPECT_EQ(logits[p - 1 + i].argmax().item<int64_t>(), r->new_ids[i]) << i;
  }
}

// Prefill-sized products with bf16 weights: exact (the widened weight) outside a
// Bf16ProductsScope, bf16-rounded activations with fp32 sums inside it; one-row decode
// products stay exact either way. Errors are against float64 products of the values each
// arithmetic defines, relative to the fp32 rounding a plain fp32 GEMM makes.
TEST(Runtime, Bf16ProductsRoundActivationsOnlyInsideTheirScope) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({96, 200}).to(at::kBFloat16);
  const at::Tensor x = at::randn({40, 200});
  const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble));
  const at::Tensor rounded =
      at::linear(x.to(at::kBFloat16).to(at::kDouble), w.to(at::kDouble));
  auto err = [](const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kDouble) - b).abs().max().item<double>();
  };
  const double fp32_err = err(at::linear(x, w.to(at::kFloat)), exact);
  ASSERT_GT(fp32_err, 0);
  EXPECT_LE(err(Linear(x, w), exact), 4 * fp32_err);
  EXPECT_LE(err(Linear(x.narrow(0, 0, 1), w), exact.narrow(0, 0, 1)), 4 * fp32_err);
  {
    const Bf16ProductsScope scope;
    EXPECT_TRUE(Bf16ProductsScope::Active());
    EXPECT_LE(err(Linear(x.narrow(0, 0, 1), w), exact.narrow(0, 0, 1)), 4 * fp32_err);
    if (!Bf16ProductsScope::Available()) GTEST_SKIP() << "no native bf16 matmul here";
    const at::Tensor y = Linear(x, w);
    EXPECT_LE(err(y, rounded), 4 * fp32_err);
    // bf16 rounding of the activations moves the product ~2^-9 relative: far more.
    EXPECT_GT(err(y, exact), 20 * fp32_err);
    const Bf16ProductsScope off(false);
    EXPECT_LE(err(Linear(x, w), exact), 4 * fp32_err);
  }
  EXPECT_FALSE(Bf16ProductsScope::Active());
  // A float32 checkpoint never takes the bf16 products.
  auto model = LanguageModel::Load(testing::StoriesModelPath());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->products(), "fp32");
}

// A document longer than the model's context is scored in rolling windows, the way
// lm-eval's get_rolling_token_windows(context_len = 1) cuts it (written out here in its
// own form): the same summed NLL, and every token predicted once.
TEST(Runtime, LongDocumentsAreScoredInRollingWindowsOfTheContext) {
  // stories260K with its context cut to 128 positions, so that a few stories make a
  // document of several windows.
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  ASSERT_TRUE(ckpt.ok());
  ModelConfig config = (*ckpt)->config();
  config.max_position_embeddings = 128;
  auto weights = LoadLlamaWeights(**ckpt);
  ASSERT_TRUE(weights.ok());
  auto model = Transformer::Create(config, std::move(*weights));
  ASSERT_TRUE(model.ok()) << model.status();
  const Transformer& t = **model;
  const Tokenizer& tok = *(*ckpt)->tokenizer();
  const int64_t w = EvalWindow(t.config());
  ASSERT_EQ(w, 128);
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok());
  std::string text;
  for (int i = 0; i < 5; ++i) text += (*docs)[i] + " ";
  std::vector<int64_t> tokens;
  for (int32_t id : tok.Encode(text)) tokens.push_back(id);
  ASSERT_GT(static_cast<int64_t>(tokens.size()), 2 * w + 10);
  const int64_t prefix = tok.document_start_id();
  at::NoGradGuard no_grad;
  auto nll = [&](const std::vector<int64_t>& input, const std::vector<int64_t>& targets) {
    const auto logits = t.Forward(at::tensor(input, at::kLong).unsqueeze(0))[0].to(at::kDouble);
    const auto logp = at::log_softmax(logits, -1);
    double s = 0;
    const auto m = static_cast<int64_t>(targets.size());
    for (int64_t i = 0; i < m; ++i) {
      s -= logp[logits.size(0) - m + i][targets[i]].item<double>();
    }
    return s;
  };
  // lm-eval: the first window predicts min(W, n) tokens after the prefix token; each
  // later one predicts up to W more from the W tokens ending before its last target.
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t first = std::min(w, n);
  std::vector<int64_t> input = {prefix};
  input.insert(input.end(), tokens.begin(), tokens.begin() + first - 1);
  double expected = nll(input, std::vector<int64_t>(tokens.begin(), tokens.begin() + first));
  int64_t predicted = first, windows = 1;
  while (predicted < n) {
    const int64_t len = std::min(n - predicted, w), end = predicted + len;
    // token_list[end - max_seq_len - 1 : end - 1], the prefix standing in before index 0
    std::vector<int64_t> in;
    for (int64_t j = end - w - 1; j < end - 1; ++j) in.push_back(j < 0 ? prefix : tokens[j]);
    expected += nll(in, std::vector<int64_t>(tokens.begin() + end - len, tokens.begin() + end));
    predicted += len;
    ++windows;
  }
  EXPECT_GE(windows, 3);
  auto r = MeasurePerplexity(t, tok, {text});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, n);
  EXPECT_NEAR(r->total_nll, expected, 1e-6 * expected);
  // A stop request ends it with CANCELLED.
  EXPECT_EQ(MeasurePerplexity(t, tok, {text}, [] { return true; }).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(Runtime, StoriesPerplexityOnTheExcerptIsBelowSix) {
  auto model = LanguageModel::Load(testing::StoriesModelPath());
  ASSERT_TRUE(model.ok()) << model.status();
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok());
  auto r = (*model)->Perplexity(*docs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->documents, 134);
  EXPECT_GT(r->tokens, 10000);
  EXPECT_GT(r->perplexity, 1.0);
  EXPECT_LT(r->perplexity, 6.0);
  // A model with one layer's attention output zeroed is measurably worse, so the
  // figure is not insensitive to the weights.
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  auto w = LoadLlamaWeights(**ckpt);
  ASSERT_TRUE(w.ok());
  w->layers[0].wo.zero_();
  auto broken = Transformer::Create((*ckpt)->config(), std::move(*w));
  ASSERT_TRUE(broken.ok());
  std::vector<int64_t> ids = {1};
  for (int32_t id : (*model)->tokenizer().Encode((*docs)[2])) ids.push_back(id);
  at::NoGradGuard no_grad;
  auto tokens = at::tensor(ids, at::kLong).unsqueeze(0);
  auto nll = [&](const Transformer& t) {
    auto logits = t.Forward(tokens.narrow(1, 0, tokens.size(1) - 1))[0];
    return at::cross_entropy_loss(logits, tokens[0].narrow(0, 1, tokens.size(1) - 1))
        .item<double>();
  };
  EXPECT_GT(nll(**broken), nll((*model)->transformer()) + 0.1);
}

// A forward pass over a whole 2,048-token window (stories260K's context) holds its
// attention scores a block of queries at a time, not [H, T, S] at once (8 heads ×
// 2,048² floats = 134 MB per product, several per layer: a 20 kB single-line
// calibration text took 51 s and 459 MB, most of it faulting those pages in). The
// rows a block computes are the rows a shorter pass computes.
TEST(Runtime, AWholeWindowForwardHoldsScoresInBlocks) {
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  ASSERT_TRUE(ckpt.ok());
  auto weights = LoadLlamaWeights(**ckpt);
  ASSERT_TRUE(weights.ok());
  auto model = Transformer::Create((*ckpt)->config(), std::move(*weights));
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t window = EvalWindow((*model)->config());
  ASSERT_EQ(window, 2048);
  const auto tokens = (at::arange(window, at::kLong) * 7 + 3) % (*model)->config().vocab_size;
  at::NoGradGuard no_grad;
  (void)(*model)->Forward(tokens.slice(0, 0, 64).unsqueeze(0));  // warm the allocator
  std::ofstream("/proc/self/clear_refs") << "5";
  auto status_bytes = [](const char* field) -> int64_t {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field))) * 1024;
    }
    return -1;
  };
  const int64_t before = status_bytes("VmRSS:");
  const at::Tensor full = (*model)->Forward(tokens.unsqueeze(0))[0];
  const int64_t growth = status_bytes("VmHWM:") - before;
  std::cout << "a 2,048-token forward grew the peak RSS by " << growth / 1024 << " KiB\n";
  EXPECT_LT(growth, int64_t{64} << 20);
  const at::Tensor prefix = (*model)->Forward(tokens.slice(0, 0, 100).unsqueeze(0))[0];
  const double scale = prefix.abs().max().item<double>();
  EXPECT_LT((full.slice(0, 0, 100) - prefix).abs().max().item<double>(), 1e-5 * scale);
}

}  // namespace
}  // namespace lrkv
