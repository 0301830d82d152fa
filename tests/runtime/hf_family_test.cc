// Random-weight checkpoints in the exact Hugging Face layout of current model
// families (their config.json fields and tensor names, bf16 safetensors): the
// runtime's logits against the independent float64 reference
// (reference_forward.h), with llama3, yarn, dynamic and linear RoPE scaling,
// partial rotary, QK-norm, biases, explicit head_dim and tied embeddings, at
// positions past the scaling's original_max_position_embeddings.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "base/dtype.h"
#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/generate_bench.h"
#include "runtime/llama_weights.h"
#include "runtime/transformer.h"
#include "surgery/convert_job.h"
#include "tests/reference_forward.h"
#include "tests/test_paths.h"
#include "verify/verify_job.h"

namespace lrkv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Family {
  std::string name;
  json config;  // config.json as the family writes it
};

testing::RefConfig RefOf(const json& j) {
  testing::RefConfig c;
  c.hidden = j["hidden_size"];
  c.inter = j["intermediate_size"];
  c.layers = j["num_hidden_layers"];
  c.heads = j["num_attention_heads"];
  c.kv_heads = j["num_key_value_heads"];
  c.head_dim = j.value("head_dim", c.hidden / c.heads);
  c.vocab = j["vocab_size"];
  c.rope_dim =
      static_cast<int>(j.value("partial_rotary_factor", 1.0) * c.head_dim) / 2 *
      2;
  c.max_pos = j["max_position_embeddings"];
  c.eps = j["rms_norm_eps"];
  c.theta = j["rope_theta"];
  c.qk_norm = j["model_type"] == "qwen3" || j["model_type"] == "olmo2";
  c.olmo2 = j["model_type"] == "olmo2";
  c.bias = j["model_type"] == "qwen2" || j.value("attention_bias", false);
  c.tied = j.value("tie_word_embeddings", false);
  c.rope_scaling = j.value("rope_scaling", json());
  const json window = j.value("sliding_window", json());
  c.window = j["model_type"] == "mistral" && window.is_number()
                 ? window.get<int>()
                 : 0;
  if (j.contains("no_rope_layers"))
    c.no_rope_layers = j["no_rope_layers"].get<std::vector<int>>();
  return c;
}

// Writes config.json and a bf16 model.safetensors with HF tensor names; returns
// the weights as the reference reads them (the bf16 values, exactly, as
// doubles).
testing::Weights WriteCheckpoint(const fs::path& dir, const json& config) {
  const testing::RefConfig c = RefOf(config);
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {c.vocab, c.hidden}},
      {"model.norm.weight", {c.hidden}}};
  if (!c.tied) shapes.push_back({"lm_head.weight", {c.vocab, c.hidden}});
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
    if (!c.olmo2) shapes.push_back({p + "input_layernorm.weight", {c.hidden}});
    shapes.push_back({p + "self_attn.q_proj.weight", {q, c.hidden}});
    shapes.push_back({p + "self_attn.k_proj.weight", {kv, c.hidden}});
    shapes.push_back({p + "self_attn.v_proj.weight", {kv, c.hidden}});
    shapes.push_back({p + "self_attn.o_proj.weight", {c.hidden, q}});
    if (c.bias) {
      shapes.push_back({p + "self_attn.q_proj.bias", {q}});
      shapes.push_back({p + "self_attn.k_proj.bias", {kv}});
      shapes.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm) {
      shapes.push_back(
          {p + "self_attn.q_norm.weight", {c.olmo2 ? q : c.head_dim}});
      shapes.push_back(
          {p + "self_attn.k_norm.weight", {c.olmo2 ? kv : c.head_dim}});
    }
    shapes.push_back({p + "post_attention_layernorm.weight", {c.hidden}});
    if (c.olmo2)
      shapes.push_back({p + "post_feedforward_layernorm.weight", {c.hidden}});
    shapes.push_back({p + "mlp.gate_proj.weight", {c.inter, c.hidden}});
    shapes.push_back({p + "mlp.up_proj.weight", {c.inter, c.hidden}});
    shapes.push_back({p + "mlp.down_proj.weight", {c.hidden, c.inter}});
  }
  at::manual_seed(7);
  testing::Weights ref;
  std::vector<at::Tensor> keep;
  std::vector<TensorView> views;
  for (const auto& [name, shape] : shapes) {
    const bool norm = name.find("norm") != std::string::npos;
    at::Tensor t =
        norm ? 1.0 + 0.2 * at::randn(shape)
             : at::randn(shape) / std::sqrt(static_cast<double>(shape.back()));
    if (name.find("bias") != std::string::npos) t = 0.5 * at::randn(shape);
    t = t.to(at::kBFloat16).contiguous();
    const auto d = t.to(at::kDouble).contiguous();
    ref[name] = std::vector<double>(d.data_ptr<double>(),
                                    d.data_ptr<double>() + d.numel());
    TensorView v;
    v.name = name;
    v.dtype = DType::kBF16;
    v.shape = shape;
    v.data = static_cast<const uint8_t*>(t.data_ptr());
    v.nbytes = t.numel() * 2;
    views.push_back(v);
    keep.push_back(t);
  }
  fs::create_directories(dir);
  EXPECT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), views,
                               {{"format", "pt"}})
                  .ok());
  std::ofstream(dir / "config.json") << config.dump(2);
  return ref;
}

json Base(const char* arch, const char* type) {
  return {{"architectures", {arch}},   {"model_type", type},
          {"hidden_size", 64},         {"intermediate_size", 96},
          {"num_hidden_layers", 2},    {"num_attention_heads", 4},
          {"num_key_value_heads", 2},  {"vocab_size", 160},
          {"rms_norm_eps", 1e-6},      {"hidden_act", "silu"},
          {"torch_dtype", "bfloat16"}, {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

std::vector<Family> Families() {
  std::vector<Family> f;
  // Llama-3.2: llama3 scaling, tied embeddings, an EOS list.
  json llama = Base("LlamaForCausalLM", "llama");
  llama.update({{"rope_theta", 500000.0},
                {"max_position_embeddings", 128},
                {"tie_word_embeddings", true},
                {"eos_token_id", {2, 3, 4}},
                {"rope_scaling",
                 {{"rope_type", "llama3"},
                  {"factor", 32.0},
                  {"low_freq_factor", 1.0},
                  {"high_freq_factor", 4.0},
                  {"original_max_position_embeddings", 16}}}});
  f.push_back({"Llama3Scaled", llama});
  // Qwen3: QK-norm, head_dim 24 != 64/4, yarn (factor from the two lengths).
  json qwen3 = Base("Qwen3ForCausalLM", "qwen3");
  qwen3.update({{"head_dim", 24},
                {"rope_theta", 1000000.0},
                {"max_position_embeddings", 64},
                {"tie_word_embeddings", false},
                {"attention_bias", false},
                {"rope_scaling",
                 {{"rope_type", "yarn"},
                  {"factor", 4.0},
                  {"original_max_position_embeddings", 16}}}});
  f.push_back({"Qwen3Yarn", qwen3});
  // Qwen2.5: q/k/v biases, dynamic NTK scaling past 16 positions.
  json qwen2 = Base("Qwen2ForCausalLM", "qwen2");
  qwen2.update({{"rope_theta", 10000.0},
                {"max_position_embeddings", 16},
                {"tie_word_embeddings", false},
                {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}});
  f.push_back({"Qwen2Dynamic", qwen2});
  // Partial rotary (RoPE on half of each head) with linear scaling.
  json partial = Base("LlamaForCausalLM", "llama");
  partial.update(
      {{"rope_theta", 10000.0},
       {"max_position_embeddings", 32},
       {"partial_rotary_factor", 0.5},
       {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}});
  f.push_back({"PartialRotaryLinear", partial});
  // Mistral: a 24-token sliding window, shorter than the 40 positions run.
  json mistral = Base("MistralForCausalLM", "mistral");
  mistral.update({{"rope_theta", 1000000.0},
                  {"max_position_embeddings", 64},
                  {"sliding_window", 24}});
  f.push_back({"MistralWindow", mistral});
  // SmolLM2-135M's shape in small: LlamaForCausalLM, 3 query heads on 1 KV
  // head, tied embeddings, rope_theta 100000.
  json smollm2 = Base("LlamaForCausalLM", "llama");
  smollm2.update({{"hidden_size", 48},
                  {"num_attention_heads", 3},
                  {"num_key_value_heads", 1},
                  {"rope_theta", 100000.0},
                  {"max_position_embeddings", 64},
                  {"tie_word_embeddings", true}});
  f.push_back({"SmolLM2", smollm2});
  // SmolLM3: every 4th layer NoPE (no_rope_layers), GQA, tied embeddings.
  json smollm3 = Base("SmolLM3ForCausalLM", "smollm3");
  smollm3.update({{"num_hidden_layers", 4},
                  {"rope_theta", 5000000.0},
                  {"max_position_embeddings", 64},
                  {"tie_word_embeddings", true},
                  {"no_rope_layers", {1, 1, 1, 0}},
                  {"no_rope_layer_interval", 4},
                  {"use_sliding_window", false},
                  {"sliding_window", nullptr}});
  f.push_back({"SmolLM3NoPE", smollm3});
  // OLMo-2: QK-norm over the whole projection (weights per head differ),
  // post-norm blocks, GQA.
  json olmo2 = Base("Olmo2ForCausalLM", "olmo2");
  olmo2.update({{"rope_theta", 500000.0},
                {"max_position_embeddings", 64},
                {"tie_word_embeddings", false},
                {"attention_bias", false}});
  f.push_back({"Olmo2", olmo2});
  return f;
}

class HfFamilies : public ::testing::TestWithParam<Family> {};

TEST_P(HfFamilies, LogitsMatchTheFloat64ReferencePastTheOriginalContext) {
  const Family& f = GetParam();
  const fs::path dir = testing::FreshTempDir("family_" + f.name);
  const testing::Weights w = WriteCheckpoint(dir, f.config);
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto weights = LoadLlamaWeights(**ckpt);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto model = Transformer::Create((*ckpt)->config(), std::move(*weights));
  ASSERT_TRUE(model.ok()) << model.status();
  const int T =
      40;  // past every family's original (pretraining) context of 16-32
  std::vector<int> tokens(T);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 37 + 11) % 160;
  const auto ref = testing::RefForward(RefOf(f.config), w, tokens);
  const at::Tensor ids =
      at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong)
          .unsqueeze(0);
  const at::Tensor logits =
      (*model)->Forward(ids)[0].to(at::kDouble).contiguous();
  double max_err = 0, max_ref = 0;
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < 160; ++v) {
      max_err =
          std::max(max_err, std::abs(logits[t][v].item<double>() - ref[t][v]));
      max_ref = std::max(max_ref, std::abs(ref[t][v]));
    }
  }
  const double rel = max_err / max_ref;
  std::printf(
      "%s: max |logit - f64 ref| / max |ref| = %.3g over %d positions\n",
      f.name.c_str(), rel, T);
  EXPECT_LT(rel, 1e-4);
  // Cut into calls (a prefill of 20, then one token at a time through the
  // cache), the same logits: the scaled rotation of a position does not depend
  // on the call.
  KVCache cache = (*model)->NewCache(1, T);
  std::vector<at::Tensor> parts = {
      (*model)->ForwardCached(cache, ids.narrow(1, 0, 20))[0]};
  for (int t = 20; t < T; ++t)
    parts.push_back((*model)->ForwardCached(cache, ids.narrow(1, t, 1))[0]);
  const at::Tensor chunked = at::cat(parts, 0).to(at::kDouble);
  EXPECT_LT((chunked - logits).abs().max().item<double>() / max_ref, 1e-5);
  // The family's positional rule matters at these positions: without its RoPE
  // scaling, sliding window or NoPE layers the logits differ.
  json plain = f.config;
  if (!plain.contains("rope_scaling") && !plain.contains("no_rope_layers") &&
      plain.value("sliding_window", json()).is_null()) {
    return;  // a plain-RoPE family (SmolLM2, OLMo-2)
  }
  plain.erase("rope_scaling");
  plain.erase("sliding_window");
  plain.erase("no_rope_layers");
  const auto unscaled = testing::RefForward(RefOf(plain), w, tokens);
  double diff = 0;
  for (int v = 0; v < 160; ++v)
    diff = std::max(diff, std::abs(unscaled[T - 1][v] - ref[T - 1][v]));
  EXPECT_GT(diff / max_ref, 1e-3);
}

// Each family converted (LRKV in reconstruct and plane mode; MQA; MLA) and
// verified past the original context (MQA against its source): the factored
// decode equals the expanded one, RoPE scaling, QK-norm and partial rotary included (plane mode may then
// select the position-free pairs of a head, which turn with frequency 0).
TEST_P(HfFamilies, ConvertThenVerifyPassesForEveryVariant) {
  const Family& f = GetParam();
  const fs::path dir = testing::FreshTempDir("family_verify_" + f.name);
  WriteCheckpoint(dir / "source", f.config);
  struct Variant {
    const char* name;
    KvVariant variant;
    RopeMode rope = RopeMode::kReconstruct;
    const char* mode = "all";
  };
  std::vector<Variant> variants = {
      {"lrkv", KvVariant::kLrkv, RopeMode::kReconstruct, "reconstruct"},
      {"mqa", KvVariant::kMqa},
      {"mla", KvVariant::kMla, RopeMode::kReconstruct, "reconstruct"},
      {"lrkv_plane", KvVariant::kLrkv, RopeMode::kPlane, "plane"}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    ConvertJobOptions o;
    o.checkpoint = (dir / "source").string();
    o.out_dir = (dir / v.name).string();
    o.conversion.variant = v.variant;
    o.conversion.rank = v.variant == KvVariant::kLrkv ? 4 : -1;
    o.conversion.latent = v.variant == KvVariant::kMla ? 24 : -1;
    o.rope_mode = v.rope;
    auto converted = RunConvertJob(o);
    ASSERT_TRUE(converted.ok()) << converted.status();
    if (v.rope == RopeMode::kPlane &&
        f.config.contains("partial_rotary_factor")) {
      // The residual's energy is spread evenly over a random head, so the
      // planes chosen must include position-free ones, or this would not test
      // them.
      auto source = ConfigFromHfJson(f.config.dump(), f.name);
      ASSERT_TRUE(source.ok());
      int free_planes = 0;
      for (const auto& layer : converted->layers) {
        for (const auto& head : layer.k.planes) {
          for (int64_t p : head) free_planes += p >= source->rope_dim / 2;
        }
      }
      EXPECT_GT(free_planes, 0);
    }
    VerifyJobOptions vo;
    vo.checkpoint = o.out_dir;
    // A dense target (MQA) has no factored decoding to check: its fidelity to the
    // source is what there is to verify.
    if (v.variant == KvVariant::kMqa) vo.source = (dir / "source").string();
    vo.modes = {v.mode};
    vo.prompt_tokens = 36;  // past every family's original context of 16-32
    vo.decode_tokens = 8;
    if (const int window = f.config.value("sliding_window", json()).is_number()
                               ? f.config["sliding_window"].get<int>()
                               : 0;
        window > 0) {
      // The decode engines attend to their whole cache: verify refuses a
      // sequence longer than the window, and is exact within it.
      auto refused = RunVerifyJob(vo);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
      GenerateBenchOptions bench;
      bench.checkpoint = o.out_dir;
      bench.context = window;
      bench.tokens = 4;
      EXPECT_EQ(RunGenerateBench(bench).status().code(),
                absl::StatusCode::kInvalidArgument);
      vo.prompt_tokens = window - vo.decode_tokens;
    }
    auto report = RunVerifyJob(vo);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->passed()) << report->ToJson().dump(1);
    for (const auto& e : report->equivalence) {
      if (e.applicable && e.expected_equivalent) {
        EXPECT_TRUE(e.equivalent)
            << e.mode << " " << e.dtype << " first bad step "
            << e.first_bad_step << " layer " << e.first_bad_layer << " error "
            << e.first_bad_error;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RealConfigs, HfFamilies,
                         ::testing::ValuesIn(Families()),
                         [](const auto& info) { return info.param.name; });

TEST(HfConfig, UnknownRopeTypeIsRefusedNamingTheField) {
  json c = Base("LlamaForCausalLM", "llama");
  c.update({{"rope_theta", 10000.0},
            {"max_position_embeddings", 32},
            {"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}}}});
  auto parsed = ConfigFromHfJson(c.dump(), "config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("'rope_scaling.rope_type'"),
            std::string::npos)
      << parsed.status();
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"original_max_position_embeddings", 8192}};
  parsed = ConfigFromHfJson(c.dump(), "config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find(
                "'rope_scaling.low_freq_factor' is required"),
            std::string::npos)
      << parsed.status();
}

// transformers derives no_rope_layers from no_rope_layer_interval when it is
// absent; a malformed list is refused naming the field.
TEST(HfConfig, SmolLM3NoRopeLayers) {
  json c = Base("SmolLM3ForCausalLM", "smollm3");
  c.update({{"num_hidden_layers", 8},
            {"rope_theta", 5e6},
            {"no_rope_layer_interval", 4}});
  auto parsed = ConfigFromHfJson(c.dump(), "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(parsed->UsesRope(i), (i + 1) % 4 != 0) << i;
  c["no_rope_layers"] = {1, 1, 0};
  parsed = ConfigFromHfJson(c.dump(), "config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("'no_rope_layers'"),
            std::string::npos);
  c["no_rope_layers"] = {1, 1, 1, 2, 1, 1, 1, 0};
  EXPECT_FALSE(ConfigFromHfJson(c.dump(), "config.json").ok());
}

TEST(HfConfig, ScalingSurvivesTheConfigRoundTrip) {
  for (const Family& f : Families()) {
    auto a = ConfigFromHfJson(f.config.dump(), f.name);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = ConfigFromHfJson(ConfigToHfJson(*a), f.name);
    ASSERT_TRUE(b.ok()) << b.status();
    const at::Tensor fa = RopeInverseFrequencies(*a, 100),
                     fb = RopeInverseFrequencies(*b, 100);
    EXPECT_TRUE(at::equal(fa, fb)) << f.name;
    EXPECT_EQ(a->rope_scaling.attention_factor,
              b->rope_scaling.attention_factor);
    EXPECT_EQ(a->eos_token_ids, b->eos_token_ids);
    EXPECT_EQ(a->nope_layers, b->nope_layers);
    EXPECT_EQ(a->model_type, b->model_type);
  }
}

}  // namespace
}  // namespace lrkv
