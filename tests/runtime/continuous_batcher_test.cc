// Continuous batching (runtime/continuous_batcher.h) on stories260K: a batched
// step computes what each engine's own step computes (judged against float64),
// for the source and for bf16-stored conversions to each factored scheme,
// sequences decoded together equal greedy generation alone, seeds reproduce,
// admission follows the KV memory, the queue is bounded, a cancelled sequence
// frees its cache, and the prompt's scored log-probabilities are the
// perplexity's NLL.
#include "runtime/continuous_batcher.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "formats/text_corpus.h"
#include "runtime/decode_engine.h"
#include "runtime/language_model.h"
#include "runtime/llama_weights.h"
#include "runtime/sampler.h"
#include "runtime/transformer.h"
#include "surgery/converter.h"
#include "tests/model_test_util.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

std::unique_ptr<LanguageModel> Stories() {
  auto m = LanguageModel::Load(testing::StoriesModelPath());
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int32_t> PromptOf(const LanguageModel& m, const std::string& text) {
  std::vector<int32_t> ids = {m.tokenizer().document_start_id()};
  for (int32_t id : m.tokenizer().Encode(text)) ids.push_back(id);
  return ids;
}

// Everything the sequence produces until it finishes.
struct Outcome {
  std::vector<GeneratedToken> prompt, tokens;
  FinishReason finish = FinishReason::kNone;
};
Outcome Drain(Sequence& s) {
  Outcome o;
  while (o.finish == FinishReason::kNone) {
    SequenceUpdate u = s.Take(std::chrono::milliseconds(1000));
    o.prompt.insert(o.prompt.end(), u.prompt.begin(), u.prompt.end());
    o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
    o.finish = u.finish;
  }
  return o;
}

std::vector<int32_t> Ids(const std::vector<GeneratedToken>& tokens) {
  std::vector<int32_t> ids;
  for (const auto& t : tokens) ids.push_back(t.id);
  return ids;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Three sequences at different lengths step together in `mode` and alone,
// twice: two decode tokens and one prefill chunk, then one token each (which
// engines may attend in one call, DecodeEngine::AttendTogether). Both are
// within the fp32 error of float64 engines doing the same (the expanded engine,
// the truth verify uses). `w32` are weights for computing in float32
// (ForCompute).
void ExpectBatchedStepEqualsStepsAlone(const ModelConfig& c,
                                       const LlamaWeights& w32,
                                       DecodeMode mode) {
  SCOPED_TRACE(DecodeModeName(mode));
  const LlamaWeights w64 = ToDtype(w32, at::kDouble);
  at::NoGradGuard no_grad;
  EngineOptions eo;
  eo.capacity = 64;
  EngineOptions eo64 = eo;
  eo64.cache_dtype = at::kDouble;
  eo64.materialize = true;
  const std::vector<std::vector<int64_t>> prompts = {
      {1, 400, 17}, {1, 30}, {1, 5, 6, 7, 8}};
  std::vector<std::unique_ptr<DecodeEngine>> together, alone, f64;
  for (const auto& p : prompts) {
    for (auto* set : {&together, &alone, &f64}) {
      auto e = set == &f64
                   ? CreateDecodeEngine(c, w64, DecodeMode::kExpanded, eo64)
                   : CreateDecodeEngine(c, w32, mode, eo);
      ASSERT_TRUE(e.ok()) << e.status();
      (*e)->Prefill(at::tensor(p, at::kLong));
      set->push_back(std::move(*e));
    }
  }
  for (const std::vector<std::vector<int64_t>>& next :
       {std::vector<std::vector<int64_t>>{{99}, {123}, {200, 201, 202, 203}},
        std::vector<std::vector<int64_t>>{{7}, {8}, {9}}}) {
    std::vector<DecodeEngine::BatchEntry> entries;
    for (size_t i = 0; i < prompts.size(); ++i)
      entries.push_back({together[i].get(), next[i], false});
    const std::vector<at::Tensor> batched = DecodeEngine::StepBatch(entries);
    ASSERT_EQ(batched.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto tokens = at::tensor(next[i], at::kLong);
      const at::Tensor own = next[i].size() == 1 ? alone[i]->Step(tokens)
                                                 : alone[i]->Prefill(tokens);
      const at::Tensor ref =
          next[i].size() == 1 ? f64[i]->Step(tokens) : f64[i]->Prefill(tokens);
      const double plain_error = MaxDiff(own, ref),
                   batched_error = MaxDiff(batched[i], ref);
      EXPECT_GT(plain_error, 0);
      EXPECT_LE(batched_error, 4 * plain_error + 1e-12)
          << "sequence " << i
          << (next[2].size() == 1 ? ", one token each" : ", mixed step");
      EXPECT_EQ(together[i]->length(), alone[i]->length());
      // Each engine keeps its own layers' attention outputs (the study reads
      // them) whichever way its step attended.
      const auto& mine = together[i]->attention_outputs();
      const auto& its = alone[i]->attention_outputs();
      ASSERT_EQ(mine.size(), its.size());
      EXPECT_LE(
          MaxDiff(mine.back(), its.back()),
          4 * MaxDiff(its.back(), f64[i]->attention_outputs().back()) + 1e-12);
    }
  }
}

TEST(ContinuousBatcher, ABatchedStepComputesWhatEachEngineComputesAlone) {
  auto m = Stories();
  ASSERT_TRUE(m);
  ExpectBatchedStepEqualsStepsAlone(
      m->config(), ForCompute(m->transformer().weights(), at::kFloat),
      DecodeMode::kExpanded);
}

// A converted model stored in bf16, as a converted bf16 checkpoint loads:
// ForCompute keeps the projections down from x as stored (a batched step
// streams them through the bf16 kernel instead of handing OpenBLAS a float32
// copy) and widens the up-projections; each scheme's factored engine steps
// together as it steps alone.
TEST(ContinuousBatcher, AConvertedBf16ModelStreamsItsFactorsAndStepsTogether) {
  const testing::StoriesModel stories = testing::LoadStories();
  struct Case {
    KvVariant variant;
    int64_t size;
    RopeMode rope;
    DecodeMode mode;
  };
  for (const Case& k :
       {Case{KvVariant::kLrkv, 2, RopeMode::kPlane, DecodeMode::kPlane},
        Case{KvVariant::kLrkv, 2, RopeMode::kSharedPlane,
             DecodeMode::kSharedPlane},
        Case{KvVariant::kMla, 24, RopeMode::kPartial, DecodeMode::kPartial},
        Case{KvVariant::kMla, 24, RopeMode::kReconstruct,
             DecodeMode::kReconstruct}}) {
    ConversionOptions o;
    o.variant = k.variant;
    o.rope_mode = k.rope;
    if (k.variant == KvVariant::kLrkv) o.rank = k.size;
    if (k.variant == KvVariant::kMla) o.latent = k.size;
    if (k.rope == RopeMode::kPartial) o.rope_planes_kept = 1;
    auto converted =
        ConvertModel(stories.config, stories.weights, o, nullptr, nullptr);
    ASSERT_TRUE(converted.ok()) << converted.status();
    const LlamaWeights stored = ToDtype(converted->weights, at::kBFloat16);
    const LlamaWeights w32 = ForCompute(stored, at::kFloat);
    const LayerWeights &s = stored.layers[0], &l = w32.layers[0];
    // Each projection down from x, as stored and as ForCompute left it.
    using Kept = std::vector<std::pair<const at::Tensor*, const at::Tensor*>>;
    const Kept kept = k.variant == KvVariant::kLrkv
                          ? Kept{{&s.k_lr.shared, &l.k_lr.shared},
                                 {&s.k_lr.down, &l.k_lr.down},
                                 {&s.v_lr.shared, &l.v_lr.shared},
                                 {&s.v_lr.down, &l.v_lr.down}}
                          : Kept{{&s.kv_down, &l.kv_down}};
    for (const auto& [from, to] : kept) {
      EXPECT_EQ(to->scalar_type(), at::kBFloat16);
      EXPECT_EQ(to->data_ptr(), from->data_ptr());
    }
    const at::Tensor& up = k.variant == KvVariant::kLrkv ? l.k_lr.up : l.k_up;
    EXPECT_EQ(up.scalar_type(), at::kFloat);
    ExpectBatchedStepEqualsStepsAlone(converted->config, w32, k.mode);
  }
}

TEST(ContinuousBatcher, SequencesDecodedTogetherEqualGreedyGenerationAlone) {
  auto m = Stories();
  ASSERT_TRUE(m);
  BatcherOptions o;
  o.cache_dtype = kernels::CacheDType::kF32;
  o.context = 256;
  o.prefill_chunk =
      4;  // prompts arrive in chunks, interleaved with decode steps
  auto b = ContinuousBatcher::Create(m->transformer(), o);
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<std::string> prompts = {
      "Once upon a time", "The little dog",
      "Lily and Ben went to the park. They saw"};
  std::vector<std::shared_ptr<Sequence>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceRequest r;
    r.prompt = PromptOf(*m, prompts[i]);
    r.max_tokens = 12 + 4 * static_cast<int64_t>(i);
    r.sampling.temperature = 0;
    auto s = (*b)->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status();
    seqs.push_back(*s);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Outcome out = Drain(*seqs[i]);
    const auto expected = m->transformer().GenerateGreedy(
        PromptOf(*m, prompts[i]), 12 + 4 * static_cast<int64_t>(i), true);
    EXPECT_EQ(Ids(out.tokens), expected) << prompts[i];
  }
  EXPECT_GE((*b)->Stats().peak_running, 2);
}

TEST(ContinuousBatcher, ASeedReproducesItsSampleAndAnotherSeedDiffers) {
  auto m = Stories();
  ASSERT_TRUE(m);
  auto b = ContinuousBatcher::Create(m->transformer(), BatcherOptions());
  ASSERT_TRUE(b.ok());
  auto run = [&](uint64_t seed) {
    SequenceRequest r;
    r.prompt = PromptOf(*m, "Once upon a time");
    r.max_tokens = 24;
    r.sampling = {1.0, 0.95, 40, seed};
    return Ids(Drain(**(*b)->Submit(r)).tokens);
  };
  const auto a = run(7);
  EXPECT_EQ(run(7), a);
  EXPECT_NE(run(8), a);
}

// The engines alone, timed: what was asked, measured (positive medians), and
// settings that leave no prompt refused.
TEST(ContinuousBatcher, TimesItsEnginesAloneAndRefusesNoRoomForAPrompt) {
  auto m = Stories();
  ASSERT_TRUE(m);
  auto b = ContinuousBatcher::Create(m->transformer(), BatcherOptions());
  ASSERT_TRUE(b.ok()) << b.status();
  auto t = (*b)->TimeEngineSteps(3, 48, 4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->batch, 3);
  EXPECT_EQ(t->context, 48);
  EXPECT_EQ(t->steps, 4);
  EXPECT_GT(t->one_ms, 0);
  EXPECT_GT(t->batch_ms, 0);
  EXPECT_EQ((*b)->TimeEngineSteps(3, 9, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->TimeEngineSteps(1, 48, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ContinuousBatcher, AdmitsWhatTheKvMemoryHoldsAndQueuesTheRest) {
  auto m = Stories();
  ASSERT_TRUE(m);
  BatcherOptions o;
  o.context = 128;
  o.max_queue = 2;
  auto probe = ContinuousBatcher::Create(m->transformer(), o);
  ASSERT_TRUE(probe.ok());
  // Room for two sequences of 48 positions at once (each allocates 1.5 x 32).
  o.kv_memory = 3 * (*probe)->CacheBytes(32);
  probe->reset();
  auto b = ContinuousBatcher::Create(m->transformer(), o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->SequencesThatFit(48), 2);
  std::vector<std::shared_ptr<Sequence>> seqs;
  absl::Status refused;
  for (int i = 0; i < 8 && refused.ok(); ++i) {
    SequenceRequest r;
    r.prompt = PromptOf(*m, "Once upon a time");
    r.max_tokens = 48 - static_cast<int64_t>(r.prompt.size());
    auto s = (*b)->Submit(r);
    if (s.ok()) {
      seqs.push_back(*s);
    } else {
      refused = s.status();
    }
  }
  // Two start, two wait (max_queue), the fifth is refused.
  EXPECT_EQ(seqs.size(), 4u);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  for (auto& s : seqs) EXPECT_EQ(Drain(*s).finish, FinishReason::kLength);
  const BatcherStats stats = (*b)->Stats();
  EXPECT_EQ(stats.peak_running, 2);
  EXPECT_EQ(stats.kv_bytes_in_use, 0);
  // A sequence that could never fit (128 positions: 4 x 32), and one past the
  // context, are refused outright.
  SequenceRequest big;
  big.prompt = PromptOf(*m, "a");
  big.max_tokens = 120;
  EXPECT_EQ((*b)->Submit(big).status().code(),
            absl::StatusCode::kInvalidArgument);
  big.max_tokens = 200;
  EXPECT_EQ((*b)->Submit(big).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ContinuousBatcher, ACancelledSequenceStopsAndFreesItsCache) {
  auto m = Stories();
  ASSERT_TRUE(m);
  auto b = ContinuousBatcher::Create(m->transformer(), BatcherOptions());
  ASSERT_TRUE(b.ok());
  SequenceRequest r;
  r.prompt = PromptOf(*m, "Once upon a time");
  r.max_tokens = 2000;
  r.stop_at_eos = false;
  auto s = (*b)->Submit(r);
  ASSERT_TRUE(s.ok());
  while ((*s)->Take(std::chrono::milliseconds(1000)).tokens.empty()) {
  }
  (*s)->Cancel();
  EXPECT_EQ(Drain(**s).finish, FinishReason::kCancelled);
  for (int i = 0; i < 100 && (*b)->Stats().running > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*b)->Stats().kv_bytes_in_use, 0);
  EXPECT_LT((*b)->Stats().generated_tokens, 2000);
}

// Scoring a document through the batcher (echo + logprobs) gives its NLL as
// `lrkv eval` computes it: both within a few times fp32's error of float64.
TEST(ContinuousBatcher, ScoredPromptLogprobsSumToThePerplexityNll) {
  auto m = Stories();
  ASSERT_TRUE(m);
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok());
  const std::string doc = (*docs)[0];
  auto eval = m->Perplexity({doc});
  ASSERT_TRUE(eval.ok());
  BatcherOptions o;
  o.cache_dtype = kernels::CacheDType::kF32;
  o.prefill_chunk = 64;
  auto b = ContinuousBatcher::Create(m->transformer(), o);
  ASSERT_TRUE(b.ok());
  SequenceRequest r;
  r.prompt = PromptOf(*m, doc);
  r.max_tokens = 0;
  r.prompt_logprobs = true;
  const Outcome out = Drain(**(*b)->Submit(r));
  ASSERT_EQ(out.prompt.size(), r.prompt.size() - 1);
  EXPECT_EQ(static_cast<int64_t>(out.prompt.size()), eval->tokens);
  double served = 0;
  for (const auto& t : out.prompt) served -= t.logprob;
  // float64 reference: the same model with float64 weights, one forward pass.
  const LlamaWeights w64 = ToDtype(m->transformer().weights(), at::kDouble);
  auto t64 = Transformer::Create(m->config(), w64);
  ASSERT_TRUE(t64.ok());
  at::NoGradGuard no_grad;
  const std::vector<int64_t> ids(r.prompt.begin(), r.prompt.end());
  const auto logp = at::log_softmax(
      (*t64)->Forward(at::tensor(ids, at::kLong).unsqueeze(0))[0], -1);
  double exact = 0;
  for (size_t i = 1; i < ids.size(); ++i)
    exact -= logp[i - 1][ids[i]].item<double>();
  const double eval_error = std::abs(eval->total_nll - exact);
  const double served_error = std::abs(served - exact);
  EXPECT_GT(eval_error, 0);
  EXPECT_LE(served_error, 4 * eval_error)
      << "served " << served << " eval " << eval->total_nll;
}

}  // namespace
}  // namespace lrkv
