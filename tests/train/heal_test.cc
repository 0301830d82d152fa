// Healing: packed rows keep documents apart, training lowers the loss, a run resumed
// from a checkpoint repeats the uninterrupted run's losses, and bad inputs fail before
// training.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "formats/text_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/llama_weights.h"
#include "runtime/stored_linear.h"
#include "runtime/transformer.h"
#include "surgery/converter.h"
#include "tests/model_test_util.h"
#include "tests/test_paths.h"
#include "train/heal_job.h"
#include "train/healer.h"
#include "train/token_data.h"

namespace lrkv {
namespace {

using ::testing::HasSubstr;

struct HealSetup {
  ModelConfig source_config, config;
  LlamaWeights source, converted;
  Tokenizer tokenizer;
  std::vector<std::string> docs;
};

HealSetup Stories() {
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  EXPECT_TRUE(ckpt.ok());
  auto w = LoadLlamaWeights(**ckpt);
  EXPECT_TRUE(w.ok());
  ConversionOptions o;
  o.rank = 2;
  auto m = ConvertModel((*ckpt)->config(), *w, o, nullptr, nullptr);
  EXPECT_TRUE(m.ok());
  auto docs = ReadDocuments(testing::StoriesTextPath());
  EXPECT_TRUE(docs.ok());
  return {(*ckpt)->config(), m->config, *w, m->weights, *(*ckpt)->tokenizer(), *docs};
}

// A deep copy, so that runs never share trained tensors.
LlamaWeights Clone(const ModelConfig& c, const LlamaWeights& w) {
  LlamaWeights out = w;
  out.embed = w.embed.clone();
  out.final_norm = w.final_norm.clone();
  out.lm_head = c.tie_word_embeddings ? out.embed : w.lm_head.clone();
  for (auto& l : out.layers) {
    for (at::Tensor* t : {&l.attn_norm, &l.wq, &l.wo, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv,
                          &l.q_norm, &l.k_norm, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down,
                          &l.kv_down, &l.k_up, &l.v_up, &l.k_lr.shared, &l.k_lr.shared_bias,
                          &l.k_lr.down, &l.k_lr.up, &l.k_lr.head_bias, &l.v_lr.shared,
                          &l.v_lr.shared_bias, &l.v_lr.down, &l.v_lr.up, &l.v_lr.head_bias}) {
      if (t->defined()) *t = t->clone();
    }
  }
  return out;
}

TEST(TokenData, PackedRowsKeepDocumentsApart) {
  const HealSetup s = Stories();
  std::vector<std::string> short_docs;  // three stories that fit one 1024-token row
  for (const auto& d : s.docs) {
    if (s.tokenizer.Encode(d).size() < 300 && short_docs.size() < 3) short_docs.push_back(d);
  }
  ASSERT_EQ(short_docs.size(), 3u);
  auto data = TokenDataset::FromDocuments(short_docs, s.tokenizer, 1024);
  ASSERT_TRUE(data.ok()) << data.status();
  const PackedRow& row = data->row(0);
  ASSERT_EQ(row.segments[0], 0);
  // The full forward of the packed row equals each document's own forward.
  auto t = Transformer::Create(s.source_config, s.source);
  ASSERT_TRUE(t.ok());
  at::NoGradGuard no_grad;
  std::vector<int64_t> tok(row.tokens.begin(), row.tokens.end() - 1),
      pos(row.positions.begin(), row.positions.end() - 1),
      seg(row.segments.begin(), row.segments.end() - 1);
  auto packed = (*t)->ForwardPacked(at::tensor(tok).unsqueeze(0), at::tensor(pos).unsqueeze(0),
                                    at::tensor(seg).unsqueeze(0))[0];
  int64_t start = 0;
  int checked = 0;
  while (start < static_cast<int64_t>(seg.size()) && seg[start] >= 0) {
    int64_t end = start;
    while (end < static_cast<int64_t>(seg.size()) && seg[end] == seg[start]) ++end;
    std::vector<int64_t> doc(tok.begin() + start, tok.begin() + end);
    auto alone = (*t)->Forward(at::tensor(doc).unsqueeze(0))[0];
    EXPECT_LE(testing::MaxRelError(packed.narrow(0, start, end - start), alone), 1e-5);
    start = end;
    ++checked;
  }
  EXPECT_EQ(checked, 3);  // the three documents shared the row
}

TEST(TokenData, RejectsEmptyDataAndShortRows) {
  const HealSetup s = Stories();
  EXPECT_EQ(TokenDataset::FromDocuments({}, s.tokenizer, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenDataset::FromDocuments(s.docs, s.tokenizer, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

HealOptions SmallRun() {
  HealOptions o;
  o.steps = 40;
  o.batch = 4;
  o.lr = 2e-3;
  o.warmup = 4;
  o.eval_every = 0;
  return o;
}

std::vector<double> Losses(Healer& h, int64_t stop_at = -1) {
  std::vector<double> losses;
  EXPECT_TRUE(h.Run([&](const HealEvent& e) {
                 if (e.kind == "step") losses.push_back(e.loss);
               },
               stop_at)
                  .ok());
  return losses;
}

TEST(Healer, ResumedRunRepeatsTheUninterruptedLosses) {
  const HealSetup s = Stories();
  auto data = TokenDataset::FromDocuments(
      std::vector<std::string>(s.docs.begin(), s.docs.begin() + 40), s.tokenizer, 128);
  ASSERT_TRUE(data.ok());
  auto make = [&] {
    auto h = Healer::Create(s.config, Clone(s.config, s.converted),
                            std::make_pair(s.source_config, s.source), *data, std::nullopt,
                            SmallRun());
    EXPECT_TRUE(h.ok()) << h.status();
    return std::move(*h);
  };
  auto straight = make();
  const auto full = Losses(*straight);
  ASSERT_EQ(full.size(), 40u);
  EXPECT_LT(full.back(), 0.7 * full.front());  // healing lowers the distillation loss
  const auto dir = testing::FreshTempDir("heal_resume");
  auto first = make();
  auto head = Losses(*first, 20);
  ASSERT_TRUE(first->SaveCheckpoint(dir.string()).ok());
  auto second = make();
  ASSERT_TRUE(second->LoadCheckpoint(dir.string()).ok());
  EXPECT_EQ(second->step(), 20);
  auto tail = Losses(*second);
  head.insert(head.end(), tail.begin(), tail.end());
  ASSERT_EQ(head.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(head[i], full[i], 1e-5) << i;
}

// Activation checkpointing recomputes each layer in the backward pass: the same
// gradients, so the same losses step for step (the recomputation repeats the forward's
// arithmetic exactly on the CPU), with K/V parameters trained in every layer (the
// first layer's input needs no gradient under a frozen embedding, and its parameters
// must still get theirs).
TEST(Healer, ActivationCheckpointingTrainsTheSameSteps) {
  const HealSetup s = Stories();
  auto data = TokenDataset::FromDocuments(
      std::vector<std::string>(s.docs.begin(), s.docs.begin() + 40), s.tokenizer, 128);
  ASSERT_TRUE(data.ok());
  HealOptions o = SmallRun();
  o.steps = 12;
  auto run = [&](bool checkpointing, LlamaWeights* trained) {
    HealOptions oo = o;
    oo.activation_checkpointing = checkpointing;
    auto h = Healer::Create(s.config, Clone(s.config, s.converted),
                            std::make_pair(s.source_config, s.source), *data, std::nullopt,
                            oo);
    EXPECT_TRUE(h.ok()) << h.status();
    auto losses = Losses(**h);
    *trained = (*h)->weights();
    return losses;
  };
  LlamaWeights plain_w, ckpt_w;
  const auto plain = run(false, &plain_w);
  const auto ckpt = run(true, &ckpt_w);
  ASSERT_EQ(plain.size(), 12u);
  ASSERT_EQ(ckpt.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(ckpt[i], plain[i], 1e-6 * plain[i]) << i;
  for (size_t l = 0; l < plain_w.layers.size(); ++l) {
    SCOPED_TRACE(l);
    const at::Tensor before = s.converted.layers[l].k_lr.up;
    ASSERT_TRUE(before.defined());
    EXPECT_GT((ckpt_w.layers[l].k_lr.up - before).abs().max().item<double>(), 0.0);
    EXPECT_LE(testing::MaxRelError(ckpt_w.layers[l].k_lr.up, plain_w.layers[l].k_lr.up), 1e-5);
  }
}

TEST(Healer, PlaneModeKeepsItsPlaneSelection) {
  HealSetup s = Stories();
  ConversionOptions o;
  o.rank = 2;
  o.rope_mode = RopeMode::kPlane;
  auto m = ConvertModel(s.source_config, s.source, o, nullptr, nullptr);
  ASSERT_TRUE(m.ok());
  const at::Tensor up_before = m->weights.layers[0].k_lr.up.clone();
  const at::Tensor down_before = m->weights.layers[0].k_lr.down.clone();
  auto data = TokenDataset::FromDocuments({s.docs[0], s.docs[1], s.docs[2]}, s.tokenizer, 128);
  ASSERT_TRUE(data.ok());
  HealOptions opts = SmallRun();
  opts.steps = 3;
  opts.warmup = 1;
  auto h = Healer::Create(m->config, Clone(m->config, m->weights),
                          std::make_pair(s.source_config, s.source), *data, std::nullopt, opts);
  ASSERT_TRUE(h.ok()) << h.status();
  Losses(**h);
  // B_h^K (the plane selection) is untouched; U_h^K trained.
  EXPECT_TRUE(at::equal((*h)->weights().layers[0].k_lr.up, up_before));
  EXPECT_FALSE(at::equal((*h)->weights().layers[0].k_lr.down, down_before));
}

TEST(Healer, BadInputsFailBeforeTraining) {
  const HealSetup s = Stories();
  auto data = TokenDataset::FromDocuments({s.docs[0], s.docs[1]}, s.tokenizer, 64);
  ASSERT_TRUE(data.ok());
  // A teacher with another vocabulary.
  ModelConfig other = s.source_config;
  other.vocab_size = 600;
  auto h = Healer::Create(s.config, Clone(s.config, s.converted),
                          std::make_pair(other, RandomLlamaWeights(other, 1)), *data,
                          std::nullopt, SmallRun());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("vocabulary"));
  // A teacher with another layer count.
  other = s.source_config;
  other.num_layers = 3;
  h = Healer::Create(s.config, Clone(s.config, s.converted),
                     std::make_pair(other, RandomLlamaWeights(other, 1)), *data, std::nullopt,
                     SmallRun());
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("layers"));
  // Distillation without a teacher; rows longer than the model's context.
  h = Healer::Create(s.config, Clone(s.config, s.converted), std::nullopt, *data, std::nullopt,
                     SmallRun());
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("teacher"));
  auto long_rows = TokenDataset::FromDocuments({s.docs[0]}, s.tokenizer, 4096);
  ASSERT_TRUE(long_rows.ok());
  h = Healer::Create(s.config, Clone(s.config, s.converted),
                     std::make_pair(s.source_config, s.source), *long_rows, std::nullopt,
                     SmallRun());
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("exceeds the model's context"));
  HealOptions bad = SmallRun();
  bad.lr = 0;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// A frozen weight kept in bf16 passes the same gradient to its input as its widened
// fp32 copy does (FrozenStoredLinear widens again in the backward instead of keeping
// the copy), within the bound of a dot product summed in any order.
TEST(Healer, FrozenStoredWeightsPassTheSameGradient) {
  at::manual_seed(3);
  const auto w = at::randn({48, 64}).to(at::kBFloat16);
  const auto g = at::randn({5, 48});
  auto x1 = at::randn({5, 64}).requires_grad_(true);
  auto x2 = x1.detach().clone().requires_grad_(true);
  (FrozenStoredLinear(x1, w) * g).sum().backward();
  (at::linear(x2, w.to(at::kFloat)) * g).sum().backward();
  const auto bound = 65 * 0x1p-24 * at::matmul(g.abs(), w.to(at::kFloat).abs());
  EXPECT_TRUE(((x1.grad() - x2.grad()).abs() <= bound).all().item<bool>());
  EXPECT_TRUE(at::equal(FrozenStoredLinear(x1, w), at::linear(x1, w.to(at::kFloat))));
  EXPECT_FALSE(w.requires_grad());
}

// The heal's memory estimate counts the tensors the trainable set trains (as the
// healer does, for a reconstruct model) and the mapped weights of student and
// teacher; a heal estimated above the memory allowed is refused before anything is
// loaded, naming the estimate, and writes nothing.
// A heal of the stories student saved in `dir` (as "student") against its source, on
// 64-token rows of `data` of the stories text.
HealJobOptions StoriesHealJob(const std::filesystem::path& dir, DocumentRange data) {
  HealJobOptions o;
  o.checkpoint = (dir / "student").string();
  o.teacher = testing::StoriesModelPath();
  o.data = testing::StoriesTextPath();
  o.data_range = data;
  o.seq_len = 64;
  o.heal = SmallRun();
  return o;
}

TEST(TokenData, HeldOutRowsLeaveTraining) {
  const HealSetup s = Stories();
  auto data = TokenDataset::FromDocuments(
      std::vector<std::string>(s.docs.begin(), s.docs.begin() + 40), s.tokenizer, 64);
  ASSERT_TRUE(data.ok());
  const int64_t rows = data->rows(), predicted = data->predicted_tokens();
  const std::vector<int32_t> last = data->row(rows - 1).tokens;
  TokenDataset held = data->HoldOut(3);
  EXPECT_EQ(held.rows(), 3);
  EXPECT_EQ(data->rows(), rows - 3);
  EXPECT_EQ(held.predicted_tokens() + data->predicted_tokens(), predicted);
  EXPECT_GT(held.predicted_tokens(), 0);
  EXPECT_EQ(held.row(2).tokens, last);
  EXPECT_EQ(held.seq_len(), 64);
}

// Healing never hurts (keep-best): a learning rate that wrecks the model ends with the
// unhealed parameters — kept step 0, the same perplexity — where without keep-best the
// same run ends worse; a learning rate that helps keeps a later step, better on --eval.
TEST(HealJob, KeepBestNeverEndsWorseThanTheUnhealedModel) {
  const HealSetup s = Stories();
  const std::filesystem::path dir = testing::FreshTempDir("heal_keep_best");
  ASSERT_TRUE(SaveSafetensorsCheckpoint((dir / "student").string(), s.config, s.converted,
                                        &s.tokenizer, DType::kF32)
                  .ok());
  auto run = [&](double lr, bool keep_best, const std::string& name) {
    HealJobOptions o = StoriesHealJob(dir, {0, 0.5});
    o.eval = testing::StoriesTextPath();
    o.eval_range = {0.9, 1};
    o.heal.steps = 12;
    o.heal.warmup = 2;
    o.heal.eval_every = 3;
    o.heal.lr = lr;
    o.heal.keep_best = keep_best;
    o.out_dir = (dir / name).string();
    auto r = RunHealJob(o, nullptr);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const HealReport wrecked = run(0.5, false, "wrecked");
  ASSERT_TRUE(wrecked.perplexity_before && wrecked.perplexity_after);
  EXPECT_GT(*wrecked.perplexity_after, *wrecked.perplexity_before);
  EXPECT_FALSE(wrecked.kept_step);

  const HealReport kept = run(0.5, true, "kept");
  ASSERT_TRUE(kept.kept_step);
  EXPECT_EQ(*kept.kept_step, 0);
  ASSERT_TRUE(kept.unhealed_validation_loss);
  EXPECT_EQ(kept.kept_validation_loss, *kept.unhealed_validation_loss);
  EXPECT_DOUBLE_EQ(*kept.perplexity_after, *kept.perplexity_before);
  int evals = 0;
  for (const HealEvent& e : kept.events) evals += e.kind == "eval";
  EXPECT_EQ(evals, 5);  // the unhealed model and steps 3, 6, 9, 12

  const HealReport helped = run(2e-3, true, "helped");
  ASSERT_TRUE(helped.kept_step);
  EXPECT_GT(*helped.kept_step, 0);
  EXPECT_LT(helped.kept_validation_loss, *helped.unhealed_validation_loss);
  EXPECT_LT(*helped.perplexity_after, *helped.perplexity_before);
  const auto report = nlohmann::json::parse(
      std::ifstream((dir / "helped" / "heal_report.json").string()));
  EXPECT_EQ(report.at("kept_step").get<int64_t>(), *helped.kept_step);
  EXPECT_EQ(report.at("settings").at("keep_best").get<bool>(), true);
  EXPECT_GT(report.at("settings").at("validation_rows").get<int64_t>(), 0);
}

TEST(HealJob, MemoryEstimateAndUpFrontRefusal) {
  const HealSetup s = Stories();
  const std::filesystem::path dir = testing::FreshTempDir("heal_memory");
  ASSERT_TRUE(SaveSafetensorsCheckpoint((dir / "student").string(), s.config, s.converted,
                                        &s.tokenizer, DType::kBF16)
                  .ok());
  HealJobOptions o = StoriesHealJob(dir, {0, 0.2});
  o.heal.steps = 2;
  o.heal.warmup = 0;
  o.heal.batch = 1;
  o.out_dir = (dir / "healed").string();
  auto m = EstimateHealMemory(o);
  ASSERT_TRUE(m.ok()) << m.status();
  auto student = Checkpoint::Open(o.checkpoint);
  auto teacher = Checkpoint::Open(o.teacher);
  ASSERT_TRUE(student.ok() && teacher.ok());
  int64_t mapped = 0;
  for (const auto* c : {student->get(), teacher->get()}) {
    for (const auto& t : c->tensors()) mapped += static_cast<int64_t>(t.nbytes);
  }
  EXPECT_EQ(m->weight_bytes, mapped);
  EXPECT_GT(m->machine_bytes, 0);
  // Checkpointing keeps one layer's activations (plus every layer's input): less.
  HealJobOptions checkpointed = o;
  checkpointed.heal.activation_checkpointing = true;
  auto mc = EstimateHealMemory(checkpointed);
  ASSERT_TRUE(mc.ok());
  EXPECT_LT(mc->activation_bytes, m->activation_bytes);
  EXPECT_EQ(mc->weight_bytes, m->weight_bytes);
  auto report = RunHealJob(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(m->trainable_parameters, report->trainable_parameters);
  EXPECT_EQ(report->memory.total_bytes, m->total_bytes);
  // The healed model is written in the student's storage dtype.
  auto healed = Checkpoint::Open(o.out_dir);
  ASSERT_TRUE(healed.ok());
  EXPECT_EQ(healed->get()->Find("model.layers.0.mlp.up_proj.weight")->dtype, DType::kBF16);
  HealJobOptions tight = o;
  tight.out_dir = (dir / "tight").string();
  tight.memory_limit_bytes = m->total_bytes - 1;
  auto refused = RunHealJob(tight, nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("does not fit"));
  EXPECT_FALSE(std::filesystem::exists(tight.out_dir));
}

}  // namespace
}  // namespace lrkv

namespace lrkv {
namespace {

std::vector<double> StepLosses(const std::string& events_path) {
  std::ifstream in(events_path);
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "step") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

// Data-parallel healing over loopback (Gloo): two processes, each with half of every
// global batch, follow the one-process loss curve.
TEST(HealCli, TwoProcessesFollowTheOneProcessCurve) {
  const auto dir = testing::FreshTempDir("heal_cli");
  const std::string lrkv = LRKV_BIN, model = testing::StoriesModelPath(),
                    text = testing::StoriesTextPath();
  const std::string conv = (dir / "conv").string();
  ASSERT_EQ(std::system((lrkv + " convert --checkpoint " + model +
                         " --variant lrkv --rank 2 --out " + conv + " > /dev/null")
                            .c_str()),
            0);
  const std::string common = " heal --checkpoint " + conv + " --teacher " + model +
                             " --data " + text +
                             " --data-range 0:0.3 --steps 8 --warmup 2 --batch 4 --seq-len "
                             "128 --eval-every 0 ";
  ASSERT_EQ(std::system((lrkv + common + "--events " + (dir / "one.jsonl").string() +
                         " --out " + (dir / "one").string() + " > /dev/null 2>&1")
                            .c_str()),
            0);
  ASSERT_EQ(std::system((lrkv + common + "--nproc 2 --events " + (dir / "two.jsonl").string() +
                         " --out " + (dir / "two").string() + " > /dev/null 2>&1")
                            .c_str()),
            0);
  const auto one = StepLosses((dir / "one.jsonl").string());
  const auto two = StepLosses((dir / "two.jsonl").string());
  ASSERT_EQ(one.size(), 8u);
  ASSERT_EQ(two.size(), 8u);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 1e-5 * one[i]) << i;
  EXPECT_TRUE(std::filesystem::exists(dir / "two" / "model.safetensors"));
}

}  // namespace
}  // namespace lrkv
