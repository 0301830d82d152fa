// Job submission under the probe's defects (each failed before its fix):
// parameters checked whole, the smaller defects, and inputs staged at
// submission so that what a client does to a path afterwards cannot reach the
// job. Loopback only.
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

// A verify that runs for a while (600 decode steps, fp32 and bf16): the source
// checked against itself, since a dense model without a source has nothing to
// verify.
std::string LongVerifyParams(const std::string& source_id) {
  return absl::StrCat(
      R"({"prompt_tokens": 200, "decode_tokens": 400, "dtype": "both", "source": ")",
      source_id, R"("})");
}

// A short verify against `source` (a checkpoint id or a server path).
std::string ShortVerifyParams(const std::string& source) {
  return absl::StrCat(R"({"prompt_tokens": 8, "decode_tokens": 4, "source": ")",
                      source, R"("})");
}

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using HardeningTest = ServiceTest;

// A submission that must be refused: its code and a phrase of its message.
struct RefusedCase {
  v1::JobKind kind;
  std::string params;
  grpc::StatusCode code;
  std::string phrase;
};

// Each job kind's parameters are checked whole at submission: wrong types (no
// silent truncation), ranges, names, missing inputs, duplicate keys, trailing
// garbage, inputs that are not text files, and a heal too big for the machine.
TEST_F(HardeningTest, ParametersAreCheckedWholeAtSubmission) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const std::string text = lrkv::testing::StoriesTextPath();
  const std::string folder = lrkv::testing::SharedPath("data");
  const std::string binary = lrkv::testing::StoriesModelPath();
  // Submits each case on checkpoint `id(kind)`; each must be refused as it
  // says.
  auto expect_refused = [&](const std::vector<RefusedCase>& cases, auto id) {
    for (const RefusedCase& c : cases) {
      v1::Job job;
      const grpc::Status st = Submit(c.kind, id(c.kind), c.params, &job);
      EXPECT_EQ(st.error_code(), c.code)
          << c.params << ": " << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr(c.phrase)) << c.params;
    }
  };
  const auto with_text = [&](const std::string& a, const std::string& path,
                             const std::string& b) { return a + path + b; };
  const std::vector<RefusedCase> cases = {
      {v1::VERIFY, R"({"prompt_tokens": -1})",
       grpc::StatusCode::INVALID_ARGUMENT, "[1, 4096]"},
      {v1::VERIFY, R"({"prompt_tokens": 0})",
       grpc::StatusCode::INVALID_ARGUMENT, "[1, 4096]"},
      {v1::VERIFY, R"({"prompt_tokens": 1000000})",
       grpc::StatusCode::INVALID_ARGUMENT, "4096"},
      {v1::VERIFY, R"({"decode_tokens": -1})",
       grpc::StatusCode::INVALID_ARGUMENT, "[0, 4096]"},
      {v1::VERIFY, R"({"decode_tokens": 1000000000})",
       grpc::StatusCode::INVALID_ARGUMENT, "[0, 4096]"},
      {v1::VERIFY, R"({"dtype": "int8"})", grpc::StatusCode::INVALID_ARGUMENT,
       "fp32, bf16 or both"},
      {v1::VERIFY, R"({"rope_modes": ["bogus"]})",
       grpc::StatusCode::INVALID_ARGUMENT, "'bogus'"},
      {v1::VERIFY, R"({"prompt_tokens": 8} trailing)",
       grpc::StatusCode::INVALID_ARGUMENT, "not valid JSON"},
      {v1::VERIFY, R"({"prompt_tokens": 8, "prompt_tokens": 9})",
       grpc::StatusCode::INVALID_ARGUMENT, "given twice"},
      {v1::VERIFY, R"({"prompt_tokens": 8.5})",
       grpc::StatusCode::INVALID_ARGUMENT, "wrong type"},
      {v1::CONVERT, R"({"variant": "lrkv", "rank": 2.7})",
       grpc::StatusCode::INVALID_ARGUMENT, "'rank' has the wrong type"},
      {v1::CONVERT, R"({"rank": 2, "calib_tokens": -1})",
       grpc::StatusCode::INVALID_ARGUMENT, "--calib-tokens"},
      {v1::CONVERT, R"({"rank": 2, "calib_tokens": 1000000000000})",
       grpc::StatusCode::INVALID_ARGUMENT, "--calib-tokens"},
      {v1::CONVERT, R"({"rank": 2, "metric": "activation"})",
       grpc::StatusCode::INVALID_ARGUMENT, "needs --calib"},
      {v1::CONVERT,
       R"({"rank": 2, "allocation": "layers", "allocation_objective": "fisher"})",
       grpc::StatusCode::INVALID_ARGUMENT, "auto, error, loss"},
      {v1::CONVERT,
       R"({"rank": 2, "allocation": "layers", "allocation_objective": "loss"})",
       grpc::StatusCode::INVALID_ARGUMENT, "--calib"},
      {v1::CONVERT, R"({"rank": 2, "allocation_tokens": 0})",
       grpc::StatusCode::INVALID_ARGUMENT, "--allocation-tokens"},
      {v1::CONVERT, R"({"rank": 2, "max_shard_size": -5})",
       grpc::StatusCode::INVALID_ARGUMENT, "wrong type"},
      {v1::CONVERT,
       with_text(R"({"rank": 2, "metric": "activation", "calib": ")", folder,
                 R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "not a regular file"},
      {v1::CONVERT, with_text(R"({"rank": 2, "eval": ")", binary, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "binary file"},
      {v1::COMPARE, with_text(R"({"budget": [], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "lists nothing"},
      {v1::COMPARE, with_text(R"({"budget": [0], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "(0, 1]"},
      {v1::COMPARE, with_text(R"({"budget": [-1], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "(0, 1]"},
      {v1::COMPARE,
       with_text(R"({"variants": ["foo"], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'foo'"},
      {v1::COMPARE, with_text(R"({"heal_steps": -1, "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'heal_steps'"},
      {v1::COMPARE, with_text(R"({"kl_tokens": -1, "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'kl_tokens'"},
      {v1::COMPARE, with_text(R"({"heal_batch": 0, "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'heal_batch'"},
  };
  expect_refused(cases, [&](v1::JobKind kind) {
    return kind == v1::VERIFY ? converted.id() : source.id();
  });
  // Heal: sequence lengths, kd without a teacher, data that is no text, and a
  // batch that needs far more memory than the machine has (it tried to allocate
  // 274 GB).
  const std::string heal = absl::StrCat(R"("teacher": ")", source.id(),
                                        R"(", "data": ")", text, R"(")");
  const std::vector<RefusedCase> heals = {
      {v1::HEAL, "{" + heal + R"(, "seq_len": 0})",
       grpc::StatusCode::INVALID_ARGUMENT, "--seq-len"},
      {v1::HEAL, "{" + heal + R"(, "seq_len": 1})",
       grpc::StatusCode::INVALID_ARGUMENT, "--seq-len"},
      {v1::HEAL, "{" + heal + R"(, "seq_len": -5})",
       grpc::StatusCode::INVALID_ARGUMENT, "--seq-len"},
      {v1::HEAL, "{" + heal + R"(, "seq_len": 1000000000})",
       grpc::StatusCode::INVALID_ARGUMENT, "context"},
      {v1::HEAL, with_text(R"({"data": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "needs a --teacher"},
      {v1::HEAL,
       absl::StrCat(R"({"teacher": ")", source.id(), R"(", "data": ")", folder,
                    R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "not a regular file"},
      {v1::HEAL,
       absl::StrCat(R"({"teacher": ")", source.id(), R"(", "data": ")", binary,
                    R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "binary file"},
      {v1::HEAL, "{" + heal + R"(, "batch": 65536, "seq_len": 2048})",
       grpc::StatusCode::RESOURCE_EXHAUSTED, "does not fit"},
  };
  expect_refused(heals, [&](v1::JobKind) { return converted.id(); });
  // Nothing was queued by any of them.
  v1::ListJobsResponse resp;
  ASSERT_TRUE(ListJobs(*stub_, 0, 0, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 1);  // ConvertStories' convert
}

// The smaller defects: a refused submission leaves no job, an offset near 2^63
// is the client's error, a huge id is not echoed whole, outside paths answer
// alike whether or not they exist, "..foo.gguf" is an ordinary name, the same
// content registered under another path is the same entry, and paging survives
// the deletion of the job its token names.
TEST_F(HardeningTest, SmallerDefects) {
  server_.reset();
  StartServer("", /*max_queued_jobs=*/1);
  v1::Checkpoint source, converted;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  // Queue of one: one running, one waiting, the third refused and not listed.
  v1::Job running, waiting, refused;
  const std::string verify = LongVerifyParams(source.id());
  ASSERT_TRUE(Submit(v1::VERIFY, source.id(), verify, &running).ok());
  ASSERT_EQ(WaitUntil(*stub_, running.id(), 30,
                      [](const v1::Job& j) { return j.state() == v1::RUNNING; })
                .state(),
            v1::RUNNING);
  ASSERT_TRUE(Submit(v1::VERIFY, source.id(), verify, &waiting).ok());
  const grpc::Status full = Submit(v1::VERIFY, source.id(), verify, &refused);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << full.error_message();
  v1::ListJobsResponse listed;
  ASSERT_TRUE(ListJobs(*stub_, 0, 0, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 2);
  for (const std::string& id : {running.id(), waiting.id()}) {
    EXPECT_TRUE(Cancel(id).ok());
  }
  // An upload chunk at offset 2^63 - 5: INVALID_ARGUMENT, not an overflow's
  // INTERNAL.
  {
    grpc::ClientContext ctx;
    v1::Checkpoint out;
    auto writer = stub_->UploadCheckpoint(&ctx, &out);
    v1::UploadCheckpointRequest msg;
    msg.mutable_header()->set_upload_id("overflow");
    msg.mutable_header()->set_file_name("m.gguf");
    msg.mutable_header()->set_total_bytes(100);
    writer->Write(msg);
    v1::UploadCheckpointRequest c;
    c.mutable_chunk()->set_offset(std::numeric_limits<int64_t>::max() - 5);
    c.mutable_chunk()->set_data(std::string(10, 'x'));
    writer->Write(c);
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("lies outside the file"));
  }
  // A 100 kB id: NOT_FOUND with a short message.
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(std::string(100000, 'j'));
    v1::Job job;
    const grpc::Status st = stub_->GetJob(&ctx, req, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_LT(st.error_message().size(), 200u);
    EXPECT_THAT(st.error_message(), HasSubstr("100000 bytes"));
  }
  // Outside the allowed folders: the same answer for a file that exists and one
  // that does not.
  v1::Checkpoint ck;
  EXPECT_EQ(Register("/etc/passwd", &ck).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("/etc/no-such-file.gguf", &ck).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // "..foo.gguf" inside an allowed folder is a name like any other; registering
  // the same bytes there keeps the first record's path.
  const fs::path dotted = dir_ / "data" / "..foo.gguf";
  fs::copy_file(lrkv::testing::StoriesModelPath(), dotted);
  const grpc::Status dotted_st = Register(dotted.string(), &ck);
  ASSERT_TRUE(dotted_st.ok()) << dotted_st.error_message();
  EXPECT_EQ(ck.id(), source.id());
  // Paging: the job a page token names is deleted before the next page is asked
  // for.
  server_.reset();
  StartServer();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::Job job;
    ASSERT_TRUE(Submit(v1::BENCH, source.id(),
                       R"({"context": [16], "batch": 1, "iterations": 1})",
                       &job)
                    .ok());
    ids.push_back(job.id());
    WaitDone(job.id());
  }
  grpc::ClientContext ctx1;
  v1::ListJobsRequest first;
  first.set_kind(v1::BENCH);
  first.set_page_size(1);
  v1::ListJobsResponse page1;
  ASSERT_TRUE(stub_->ListJobs(&ctx1, first, &page1).ok());
  ASSERT_EQ(page1.jobs_size(), 1);
  ASSERT_FALSE(page1.next_page_token().empty());
  {
    grpc::ClientContext ctx;
    v1::DeleteJobRequest req;
    req.set_job_id(page1.jobs(0).id());
    v1::DeleteJobResponse resp;
    ASSERT_TRUE(stub_->DeleteJob(&ctx, req, &resp).ok());
  }
  grpc::ClientContext ctx2;
  v1::ListJobsRequest next = first;
  next.set_page_size(10);
  next.set_page_token(page1.next_page_token());
  v1::ListJobsResponse page2;
  const grpc::Status paged = stub_->ListJobs(&ctx2, next, &page2);
  ASSERT_TRUE(paged.ok()) << paged.error_message();
  EXPECT_EQ(page2.jobs_size(), 2);
  server_.reset();
  auto store = Store::Open((dir_ / "data" / "lrkv.db").string());
  ASSERT_TRUE(store.ok());
  auto record = (*store)->GetCheckpoint(source.id());
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->path,
            (dir_ / "data" / "checkpoints" / (source.id() + ".gguf")).string());
}

// The same for a job's text inputs: an eval file checked at submission and
// replaced by a symlink to an outside binary before the job runs is not what
// the job reads.
TEST_F(HardeningTest, JobsReadTheTextInputsStagedAtSubmission) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  auto docs = ReadDocuments(lrkv::testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok());
  const fs::path text = dir_ / "data" / "eval.txt";
  {
    std::ofstream out(text);
    for (int i = 0; i < 5; ++i) out << (*docs)[i] << "\n<|endoftext|>\n";
  }
  const fs::path outside = dir_ / "outside.bin";
  fs::copy_file(lrkv::testing::StoriesModelPath(), outside);
  // One worker: a long verify runs first, so the convert waits in the queue
  // meanwhile.
  v1::Job blocker, convert;
  ASSERT_TRUE(
      Submit(v1::VERIFY, source.id(), LongVerifyParams(source.id()), &blocker)
          .ok());
  ASSERT_TRUE(
      Submit(v1::CONVERT, source.id(),
             absl::StrCat(R"({"rank": 2, "eval": ")", text.string(), R"("})"),
             &convert)
          .ok());
  EXPECT_NE(convert.params_json().find((dir_ / "data" / "inputs").string()),
            std::string::npos)
      << convert.params_json();
  fs::remove(text);
  fs::create_symlink(outside, text);
  ASSERT_TRUE(Cancel(blocker.id()).ok());
  const v1::Job done = WaitDone(convert.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(convert.id(), &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  // Exactly the five stories' tokens (the outside file would give others, or
  // fail).
  auto ckpt = Checkpoint::Open(lrkv::testing::StoriesModelPath());
  ASSERT_TRUE(ckpt.ok());
  int64_t tokens = 0;
  for (int i = 0; i < 5; ++i)
    tokens += (*ckpt)->tokenizer()->Encode((*docs)[i]).size();
  EXPECT_EQ(json["eval_tokens"].get<int64_t>(), tokens);
}

// A verify's `source` named by path is registered at submission (staged by
// content, as RegisterCheckpoint stages it): the job reads that copy even when
// the path is replaced by a symlink to an outside file before it runs. Named by
// id it is that checkpoint; neither an id nor an absolute path is
// INVALID_ARGUMENT; a path outside the allowed folders is PERMISSION_DENIED at
// submission.
TEST_F(HardeningTest, AVerifySourceIsStagedAtSubmission) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const fs::path src = dir_ / "data" / "src.gguf";
  fs::copy_file(lrkv::testing::StoriesModelPath(), src);
  const fs::path outside = dir_ / "outside.gguf";
  {
    std::ofstream out(outside);
    out << "not a model";
  }
  v1::Job blocker, verify;
  ASSERT_TRUE(
      Submit(v1::VERIFY, source.id(), LongVerifyParams(source.id()), &blocker)
          .ok());
  ASSERT_TRUE(Submit(v1::VERIFY, converted.id(),
                     ShortVerifyParams(src.string()), &verify)
                  .ok());
  EXPECT_NE(verify.params_json().find(
                (dir_ / "data" / "checkpoints" / source.id()).string()),
            std::string::npos)
      << verify.params_json();  // the same content as the registered source:
                                // its entry
  fs::remove(src);
  fs::create_symlink(outside, src);
  ASSERT_TRUE(Cancel(blocker.id()).ok());
  const v1::Job done = WaitDone(verify.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(verify.id(), &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  EXPECT_TRUE(json["head_diversity"].contains(
      "source_centred"));  // the source was read
  EXPECT_EQ(json["source"], "checkpoint " + source.id());  // named by its id
  EXPECT_EQ(report.json().find((dir_ / "data").string()), std::string::npos);

  v1::Job by_id;
  ASSERT_TRUE(
      Submit(v1::VERIFY, converted.id(), ShortVerifyParams(source.id()), &by_id)
          .ok());
  EXPECT_NE(by_id.params_json().find((dir_ / "data" / "checkpoints").string()),
            std::string::npos);
  EXPECT_EQ(WaitDone(by_id.id()).state(), v1::SUCCEEDED);
  v1::Job refused;
  grpc::Status st = Submit(v1::VERIFY, converted.id(),
                           R"({"source": "no-such-id"})", &refused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("'source'"));
  st = Submit(v1::VERIFY, converted.id(),
              absl::StrCat(R"({"source": ")", outside.string(), R"("})"),
              &refused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << st.error_message();
}

}  // namespace
}  // namespace lrkv::service
