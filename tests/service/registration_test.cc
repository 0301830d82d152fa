// Checkpoint registration and upload under the probe's defects (each failed
// before its fix): tensor sets checked against the config, the registered copy
// read by jobs, and both ways in refusing a malformed file alike. Loopback
// only.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "formats/config.h"
#include "formats/safetensors.h"
#include "formats/text_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/llama_weights.h"
#include "service/store.h"
#include "tests/model_test_util.h"
#include "tests/service/service_fixture.h"
#include "tests/service/service_probe_util.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using HardeningTest = ServiceTest;

// A checkpoint whose files parse but whose tensors do not make the model its
// config describes (one missing, one misshaped, one left over) is refused at
// registration and at upload alike, naming the tensor, not in its first job.
TEST_F(HardeningTest, TensorSetsAreCheckedAgainstTheConfigAtRegistration) {
  ModelConfig c = lrkv::testing::SmallConfig();
  c.model_type = "llama";
  c.max_position_embeddings = 64;
  const LlamaWeights w = RandomLlamaWeights(c, 3);
  std::vector<at::Tensor> keep;
  auto views = WeightViews(c, w, &keep);
  ASSERT_TRUE(views.ok()) << views.status();
  struct Case {
    std::string name, phrase;
    std::function<void(std::vector<TensorView>*)> damage;
  };
  const std::vector<Case> cases = {
      {"missing", "missing tensor 'model.layers.1.mlp.up_proj.weight'",
       [](std::vector<TensorView>* v) {
         v->erase(std::remove_if(v->begin(), v->end(),
                                 [](const TensorView& t) {
                                   return t.name ==
                                          "model.layers.1.mlp.up_proj.weight";
                                 }),
                  v->end());
       }},
      {"misshaped", "has shape [96, 47]",
       [](std::vector<TensorView>* v) {
         for (auto& t : *v) {
           if (t.name == "model.layers.0.mlp.gate_proj.weight") {
             t.shape = {96, 47};
             t.nbytes = 96 * 47 * 4;
           }
         }
       }},
      {"extra", "unexpected tensor 'model.layers.9.self_attn.q_proj.weight'",
       [](std::vector<TensorView>* v) {
         TensorView t = v->back();
         t.name = "model.layers.9.self_attn.q_proj.weight";
         v->push_back(t);
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const fs::path dir = dir_ / "data" / ("bad_" + k.name);
    fs::create_directories(dir);
    std::vector<TensorView> damaged = *views;
    k.damage(&damaged);
    ASSERT_TRUE(
        WriteSafetensors((dir / "model.safetensors").string(), damaged, {})
            .ok());
    std::ofstream(dir / "config.json") << ConfigToHfJson(c);
    v1::Checkpoint ck;
    const grpc::Status reg = Register(dir.string(), &ck);
    EXPECT_EQ(reg.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << reg.error_message();
    EXPECT_THAT(reg.error_message(), HasSubstr(k.phrase));
  }
  // The undamaged set registers.
  const fs::path good = dir_ / "data" / "good";
  fs::create_directories(good);
  ASSERT_TRUE(
      WriteSafetensors((good / "model.safetensors").string(), *views, {}).ok());
  std::ofstream(good / "config.json") << ConfigToHfJson(c);
  v1::Checkpoint ck;
  const grpc::Status ok = Register(good.string(), &ck);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

// Check then use: a registered folder is replaced by a symlink to an outside
// folder holding another model. Jobs read the copy staged at registration (the
// outside model is never opened), and registering through a symlink that leads
// outside is refused.
TEST_F(HardeningTest, JobsReadTheRegisteredCopyNotWhatThePathBecameLater) {
  const fs::path inside = dir_ / "data" / "mine";
  const fs::path outside = dir_ / "outside";  // not an allowed folder
  fs::create_directories(inside);
  fs::create_directories(outside);
  // Inside: the converted stories model; outside: the stories source as GGUF,
  // so that a job that read it would see a dense model and report no factored
  // mode.
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const fs::path artifact = dir_ / "data" / "artifacts";
  fs::path converted_dir;
  for (const auto& e : fs::directory_iterator(artifact))
    converted_dir = e.path();
  fs::copy(converted_dir, inside / "ckpt");
  v1::Checkpoint mine;
  ASSERT_TRUE(Register((inside / "ckpt").string(), &mine).ok());
  EXPECT_EQ(mine.id(), converted.id());  // the same content, the same entry
  fs::copy_file(lrkv::testing::StoriesModelPath(), outside / "model.gguf");
  // Swap: the folder becomes a symlink to the outside one.
  fs::remove_all(inside / "ckpt");
  fs::create_directory_symlink(outside, inside / "ckpt");
  v1::Job job;
  ASSERT_TRUE(Submit(v1::VERIFY, mine.id(),
                     R"({"prompt_tokens": 8, "decode_tokens": 4})", &job)
                  .ok());
  const v1::Job done = WaitDone(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(job.id(), &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  EXPECT_EQ(json["variant"],
            "lrkv r=2");  // the registered model, not the outside one
  // Named as the client names it (its id), not by lrkvd's folder.
  EXPECT_EQ(json["checkpoint"], "checkpoint " + mine.id());
  EXPECT_EQ(report.json().find((dir_ / "data").string()), std::string::npos);
  // Registering through that symlink now: refused, the outside file unread.
  v1::Checkpoint through;
  const grpc::Status st = Register((inside / "ckpt").string(), &through);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << st.error_message();
  EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr("gguf")));
}

// The same malformed file given both ways in — registered (a folder with its
// config, or the .gguf) and uploaded — gets the same code and names the same
// problem (they used to differ: the two paths validated differently).
TEST_F(HardeningTest, RegisterAndUploadRefuseAMalformedFileAlike) {
  const std::string config = R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 5,
      "intermediate_size": 172, "vocab_size": 512, "max_position_embeddings": 512})";
  std::ifstream manifest(lrkv::testing::FixturePath("malformed/MANIFEST.tsv"));
  std::string line;
  int compared = 0;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string file = line.substr(0, line.find('\t'));
    const std::string phrase = line.substr(line.find('\t') + 1);
    SCOPED_TRACE(file);
    const fs::path original = lrkv::testing::FixturePath("malformed/" + file);
    const bool gguf = original.extension() == ".gguf";
    fs::path registered = dir_ / "data" / ("reg_" + std::to_string(compared));
    fs::create_directories(registered);
    if (gguf) {
      registered /= file;
      fs::copy_file(original, registered);
    } else {
      fs::copy_file(original, registered / "model.safetensors");
      std::ofstream(registered / "config.json") << config;
    }
    v1::Checkpoint ck;
    const grpc::Status reg = Register(registered.string(), &ck);
    const grpc::Status up = Upload(original.string(), &ck, gguf ? "" : config);
    EXPECT_EQ(reg.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << reg.error_message();
    EXPECT_EQ(up.error_code(), reg.error_code()) << up.error_message();
    EXPECT_THAT(reg.error_message(), HasSubstr(phrase));
    EXPECT_THAT(up.error_message(), HasSubstr(phrase));
    ++compared;
  }
  EXPECT_GE(compared, 15);
}

}  // namespace
}  // namespace lrkv::service
