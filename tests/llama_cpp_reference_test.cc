// llama.cpp as the reference runtime (npm node-llama-cpp, its prebuilt CPU binary): the
// stories260K GGUF and GGUF exports of its conversions (GQA, MQA, --expand'ed LRKV and
// MLA) give the same perplexity in llama.cpp as in lrkv's runtime (within 1e-4
// relative) and the same greedy tokens. Token ids are ours for both, so the comparison
// is of the model computation (and of the exported file), not of tokenization.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "model/text_corpus.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"
#include "surgery/convert_job.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kDocuments = 4;
constexpr int kGreedySteps = 16;

struct Case {
  std::string name;
  KvVariant variant;
  int64_t rank = -1, kv_heads = -1, latent = -1;
  bool expand = false;
};

// The GGUF llama.cpp is given: the shared model, or an export of its conversion.
std::string GgufFor(const Case& c) {
  if (c.name == "Source") return testing::StoriesModelPath();
  const fs::path out = testing::FreshTempDir("llamacpp_" + c.name) / "converted";
  ConvertJobOptions o;
  o.checkpoint = testing::StoriesModelPath();
  o.out_dir = out.string();
  o.conversion.variant = c.variant;
  o.conversion.rank = c.rank;
  o.conversion.kv_heads = c.kv_heads;
  o.conversion.latent = c.latent;
  o.expand = c.expand;
  o.format = "gguf";
  auto report = RunConvertJob(o);
  EXPECT_TRUE(report.ok()) << report.status();
  return (out / kGgufExportFileName).string();
}

class LlamaCppReference : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaCppReference, SamePerplexityAndGreedyTokensAsLlamaCpp) {
  const std::string gguf = GgufFor(GetParam());
  auto model = LanguageModel::Load(gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  const Tokenizer& tok = (*model)->tokenizer();
  auto stories = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(stories.ok()) << stories.status();
  const std::vector<std::string> docs(stories->begin(), stories->begin() + kDocuments);

  json input = {{"docs", json::array()}};
  for (const auto& d : docs) {
    std::vector<int32_t> ids = {tok.document_start_id()};
    for (int32_t id : tok.Encode(d)) ids.push_back(id);
    input["docs"].push_back(ids);
  }
  std::vector<int32_t> prompt = {tok.document_start_id()};
  for (int32_t id : tok.Encode("Once upon a time")) prompt.push_back(id);
  input["prompt"] = prompt;
  const fs::path tmp = testing::FreshTempDir("llamacpp_io_" + GetParam().name);
  const std::string in = (tmp / "ids.json").string(), out = (tmp / "ref.json").string();
  std::ofstream(in) << input.dump();
  const std::string cmd = "node " + std::string(LRKV_JS_DIR) + "/llama_cpp_reference.mjs '" +
                          gguf + "' '" + in + "' '" + out + "' " + std::to_string(kGreedySteps);
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd << " failed: are the npm test references installed (bash scripts/setup.sh)?";
  std::ifstream ref_file(out);
  const json ref = json::parse(ref_file);

  double ref_nll = 0;
  int64_t ref_tokens = 0;
  for (size_t i = 0; i < ref["nll"].size(); ++i) {
    ref_nll += ref["nll"][i].get<double>();
    ref_tokens += ref["tokens"][i].get<int64_t>();
  }
  auto ours = (*model)->Perplexity(docs);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ(ours->tokens, ref_tokens);
  const double ref_ppl = std::exp(ref_nll / ref_tokens);
  const double rel = std::abs(ours->perplexity - ref_ppl) / ref_ppl;
  std::printf("%s: perplexity lrkv %.6f llama.cpp %.6f (rel %.2e) over %lld tokens\n",
              GetParam().name.c_str(), ours->perplexity, ref_ppl, rel,
              static_cast<long long>(ref_tokens));
  EXPECT_LT(rel, 1e-4);
  const std::vector<int32_t> greedy =
      (*model)->transformer().GenerateGreedy(prompt, kGreedySteps, /*stop_at_eos=*/false);
  EXPECT_EQ(greedy, ref["greedy"].get<std::vector<int32_t>>());
}

INSTANTIATE_TEST_SUITE_P(
    StoriesAndExports, LlamaCppReference,
    ::testing::Values(Case{"Source", KvVariant::kLrkv},
                      Case{"Gqa2", KvVariant::kGqa, -1, 2},
                      Case{"Mqa", KvVariant::kMqa},
                      Case{"LrkvExpanded", KvVariant::kLrkv, 4, -1, -1, true},
                      Case{"MlaExpanded", KvVariant::kMla, -1, -1, 24, true}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lrkv
