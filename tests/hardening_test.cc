// Regression tests for the service probe's defects (one test per defect family): each
// failed before its fix. Loopback only, bounded in time.
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

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "runtime/llama_weights.h"
#include "model/safetensors.h"
#include "model/text_corpus.h"
#include "nlohmann/json.hpp"
#include "service/store.h"
#include "tests/model_test_util.h"
#include "tests/service_fixture.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using HardeningTest = ServiceTest;

grpc::Status ListJobs(v1::Lrkv::Stub& stub, int state, int kind,
                      v1::ListJobsResponse* out) {
  grpc::ClientContext ctx;
  v1::ListJobsRequest req;
  req.set_state(static_cast<v1::JobState>(state));
  req.set_kind(static_cast<v1::JobKind>(kind));
  return stub.ListJobs(&ctx, req, out);
}

// Enums arrive as integers: outside the enum is INVALID_ARGUMENT, never a crash
// (state 127 used to index the state-name table out of bounds and kill lrkvd).
TEST_F(HardeningTest, EnumsOutsideTheirRangeAreInvalidArguments) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  v1::Job job;
  ASSERT_TRUE(Submit(v1::BENCH, ck.id(), R"({"context": [16], "batch": 1, "iterations": 1})",
                     &job)
                  .ok());
  for (int state : {6, 7, 8, 127, -1, 1 << 30}) {
    v1::ListJobsResponse resp;
    const grpc::Status st = ListJobs(*stub_, state, 0, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << state;
    EXPECT_THAT(st.error_message(), HasSubstr("is not a JobState")) << state;
  }
  for (int kind : {7, 99, -3}) {
    v1::ListJobsResponse resp;
    const grpc::Status st = ListJobs(*stub_, 0, kind, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << kind;
    EXPECT_THAT(st.error_message(), HasSubstr("is not a JobKind")) << kind;
  }
  for (int kind : {7, 99}) {
    const grpc::Status st = Submit(static_cast<v1::JobKind>(kind), ck.id(), "{}", &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << kind;
  }
  // The server is still up and answers a valid filter.
  v1::ListJobsResponse resp;
  ASSERT_TRUE(ListJobs(*stub_, 0, v1::BENCH, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 1);
}

// One server per data folder (a second re-queued the first's running job and ran it
// twice), and none on a port another holds (SO_REUSEPORT split the requests).
TEST_F(HardeningTest, ASecondServerOnTheSameFolderOrPortIsRefused) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = (dir_ / "data").string();
  auto second = LrkvServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another lrkvd"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("pid "));

  o.data_dir = (dir_ / "other").string();
  o.listen = absl::StrCat("127.0.0.1:", server_->port());
  auto same_port = LrkvServer::Start(o);
  ASSERT_FALSE(same_port.ok());
  EXPECT_EQ(same_port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(same_port.status().message()), HasSubstr("cannot listen"));
  // The refused server released its folder: a third one on a free port starts there.
  o.listen = "127.0.0.1:0";
  auto third = LrkvServer::Start(o);
  ASSERT_TRUE(third.ok()) << third.status();
  (*third)->Shutdown();

  // Once the first stops, its folder is free again.
  server_->Shutdown();
  server_.reset();
  o.data_dir = (dir_ / "data").string();
  auto again = LrkvServer::Start(o);
  EXPECT_TRUE(again.ok()) << again.status();
}

// Waits (at most `seconds`) until `done(job)`.
template <typename Done>
v1::Job WaitUntil(v1::Lrkv::Stub& stub, const std::string& id, double seconds, Done done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  v1::Job job = GetJob(stub, id);
  while (!done(job) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    job = GetJob(stub, id);
  }
  return job;
}

int64_t RowsOf(const fs::path& db, const std::string& table, const std::string& job) {
  auto store = Store::Open(db.string());
  EXPECT_TRUE(store.ok());
  auto n = (*store)->CountRows(table, job);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : -1;
}

// Cancel reaches inside a running job's loops (a verify of 400 decode steps; a convert
// in its activation calibration over the whole text, ~10 s uninterrupted, which used to
// run on for 86 s after a cancel): it stops within 2 s and leaves no artifacts, report
// or result rows. A shutdown stops a running convert as fast (it used to wait 36 s)
// and puts it back in the queue.
TEST_F(HardeningTest, CancelStopsARunningJobWithinTwoSecondsAndLeavesNothing) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const std::string text = lrkv::testing::StoriesTextPath();
  const std::string convert_params =
      absl::StrCat(R"({"rank": 2, "metric": "activation", "calib": ")", text,
                   R"(", "calib_tokens": 1000000, "eval": ")", text, R"("})");
  struct Case {
    v1::JobKind kind;
    std::string checkpoint, params;
  };
  for (const Case& c :
       {Case{v1::VERIFY, converted.id(),
             R"({"prompt_tokens": 200, "decode_tokens": 400, "dtype": "both"})"},
        Case{v1::CONVERT, source.id(), convert_params}}) {
    SCOPED_TRACE(v1::JobKind_Name(c.kind));
    v1::Job job;
    ASSERT_TRUE(Submit(c.kind, c.checkpoint, c.params, &job).ok());
    const v1::Job running = WaitUntil(*stub_, job.id(), 60, [](const v1::Job& j) {
      return j.state() == v1::RUNNING;
    });
    ASSERT_EQ(running.state(), v1::RUNNING);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // well inside its loops
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(Cancel(job.id()).ok());
    const v1::Job done = WaitUntil(*stub_, job.id(), 10, [](const v1::Job& j) {
      return j.state() != v1::RUNNING && j.state() != v1::QUEUED;
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(done.state(), v1::CANCELLED);
    EXPECT_LT(seconds, 2.0);
    std::printf("cancelled a running %s in %.3f s\n", v1::JobKind_Name(c.kind).c_str(),
                seconds);
    EXPECT_FALSE(fs::exists(dir_ / "data" / "artifacts" / job.id()));
    EXPECT_FALSE(fs::exists(dir_ / "data" / "reports" / (job.id() + ".json")));
    server_.reset();
    for (const char* table : {"verification_checks", "cache_measurements", "conversions",
                              "conversion_layers", "evaluations"}) {
      EXPECT_EQ(RowsOf(dir_ / "data" / "lrkv.db", table, job.id()), 0) << table;
    }
    StartServer();
  }
  v1::Job job;
  ASSERT_TRUE(Submit(v1::CONVERT, source.id(), convert_params, &job).ok());
  ASSERT_EQ(WaitUntil(*stub_, job.id(), 60, [](const v1::Job& j) {
              return j.state() == v1::RUNNING;
            }).state(),
            v1::RUNNING);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);
  std::printf("shut down with a running convert in %.3f s\n", seconds);
  StartServer();
  // Back in the queue, so the new server runs it again (this test then cancels it).
  EXPECT_THAT(GetJob(*stub_, job.id()).state(), ::testing::AnyOf(v1::QUEUED, v1::RUNNING));
  ASSERT_TRUE(Cancel(job.id()).ok());
  EXPECT_EQ(WaitUntil(*stub_, job.id(), 10, [](const v1::Job& j) {
              return j.state() != v1::RUNNING && j.state() != v1::QUEUED;
            }).state(),
            v1::CANCELLED);
}

// A pipeline interrupted in its heal stage (a shutdown re-queues it, as a SIGKILL's
// restart does) runs again from a clean slate: attempt 2 succeeds (it used to fail on
// the converted folder attempt 1 left) and holds one attempt's rows, not two.
TEST_F(HardeningTest, AnInterruptedPipelineRunsAgainCleanly) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  const std::string params = absl::StrCat(
      R"({"convert": {"variant": "lrkv", "rank": 2},
          "heal": {"data": ")", lrkv::testing::StoriesTextPath(),
      R"(", "data_range": "0:0.3", "steps": 120, "batch": 2, "seq_len": 64, "warmup": 1,
                   "eval_every": 0},
          "verify": {"prompt_tokens": 8, "decode_tokens": 4},
          "bench": {"context": 16, "tokens": 2}})");
  v1::Job job;
  ASSERT_TRUE(Submit(v1::PIPELINE, source.id(), params, &job).ok());
  const v1::Job healing = WaitUntil(*stub_, job.id(), 60, [](const v1::Job& j) {
    return j.state() == v1::RUNNING && j.progress().stage() == "heal" &&
           j.progress().message() == "step";
  });
  ASSERT_EQ(healing.progress().stage(), "heal");
  ASSERT_TRUE(fs::exists(dir_ / "data" / "artifacts" / job.id() / "converted"));
  server_->Shutdown();
  server_.reset();
  StartServer();
  const v1::Job done = WaitUntil(*stub_, job.id(), 300, [](const v1::Job& j) {
    return j.state() != v1::RUNNING && j.state() != v1::QUEUED;
  });
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  EXPECT_EQ(done.attempts(), 2);
  server_.reset();
  EXPECT_EQ(RowsOf(dir_ / "data" / "lrkv.db", "conversions", job.id()), 1);
  // One attempt's: 120 steps and keep-best's two evaluations.
  EXPECT_EQ(RowsOf(dir_ / "data" / "lrkv.db", "loss_curve", job.id()), 122);
}

// Each job kind's parameters are checked whole at submission: wrong types (no silent
// truncation), ranges, names, missing inputs, duplicate keys, trailing garbage, inputs
// that are not text files, and a heal too big for the machine.
TEST_F(HardeningTest, ParametersAreCheckedWholeAtSubmission) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const std::string text = lrkv::testing::StoriesTextPath();
  const std::string folder = lrkv::testing::SharedPath("data");
  const std::string binary = lrkv::testing::StoriesModelPath();
  struct Case {
    v1::JobKind kind;
    std::string params;
    grpc::StatusCode code;
    std::string phrase;
  };
  const auto with_text = [&](const std::string& a, const std::string& path,
                             const std::string& b) { return a + path + b; };
  const std::vector<Case> cases = {
      {v1::VERIFY, R"({"prompt_tokens": -1})", grpc::StatusCode::INVALID_ARGUMENT, "[1, 4096]"},
      {v1::VERIFY, R"({"prompt_tokens": 0})", grpc::StatusCode::INVALID_ARGUMENT, "[1, 4096]"},
      {v1::VERIFY, R"({"prompt_tokens": 1000000})", grpc::StatusCode::INVALID_ARGUMENT, "4096"},
      {v1::VERIFY, R"({"decode_tokens": -1})", grpc::StatusCode::INVALID_ARGUMENT, "[0, 4096]"},
      {v1::VERIFY, R"({"decode_tokens": 1000000000})", grpc::StatusCode::INVALID_ARGUMENT,
       "[0, 4096]"},
      {v1::VERIFY, R"({"dtype": "int8"})", grpc::StatusCode::INVALID_ARGUMENT, "fp32, bf16 or both"},
      {v1::VERIFY, R"({"rope_modes": ["bogus"]})", grpc::StatusCode::INVALID_ARGUMENT, "'bogus'"},
      {v1::VERIFY, R"({"prompt_tokens": 8} trailing)", grpc::StatusCode::INVALID_ARGUMENT,
       "not valid JSON"},
      {v1::VERIFY, R"({"prompt_tokens": 8, "prompt_tokens": 9})",
       grpc::StatusCode::INVALID_ARGUMENT, "given twice"},
      {v1::VERIFY, R"({"prompt_tokens": 8.5})", grpc::StatusCode::INVALID_ARGUMENT, "wrong type"},
      {v1::CONVERT, R"({"variant": "lrkv", "rank": 2.7})", grpc::StatusCode::INVALID_ARGUMENT,
       "'rank' has the wrong type"},
      {v1::CONVERT, R"({"rank": 2, "calib_tokens": -1})", grpc::StatusCode::INVALID_ARGUMENT, "--calib-tokens"},
      {v1::CONVERT, R"({"rank": 2, "calib_tokens": 1000000000000})", grpc::StatusCode::INVALID_ARGUMENT,
       "--calib-tokens"},
      {v1::CONVERT, R"({"rank": 2, "metric": "activation"})", grpc::StatusCode::INVALID_ARGUMENT,
       "needs --calib"},
      {v1::CONVERT, R"({"rank": 2, "allocation": "layers", "allocation_objective": "fisher"})",
       grpc::StatusCode::INVALID_ARGUMENT, "auto, error, loss"},
      {v1::CONVERT, R"({"rank": 2, "allocation": "layers", "allocation_objective": "loss"})",
       grpc::StatusCode::INVALID_ARGUMENT, "--calib"},
      {v1::CONVERT, R"({"rank": 2, "allocation_tokens": 0})", grpc::StatusCode::INVALID_ARGUMENT,
       "--allocation-tokens"},
      {v1::CONVERT, R"({"rank": 2, "max_shard_size": -5})", grpc::StatusCode::INVALID_ARGUMENT, "wrong type"},
      {v1::CONVERT, with_text(R"({"rank": 2, "metric": "activation", "calib": ")", folder, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "not a regular file"},
      {v1::CONVERT, with_text(R"({"rank": 2, "eval": ")", binary, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "binary file"},
      {v1::COMPARE, with_text(R"({"budget": [], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "no budget"},
      {v1::COMPARE, with_text(R"({"budget": [0], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "(0, 1]"},
      {v1::COMPARE, with_text(R"({"budget": [-1], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "(0, 1]"},
      {v1::COMPARE, with_text(R"({"variants": ["foo"], "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'foo'"},
      {v1::COMPARE, with_text(R"({"heal_steps": -1, "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'heal_steps'"},
      {v1::COMPARE, with_text(R"({"kl_tokens": -1, "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'kl_tokens'"},
      {v1::COMPARE, with_text(R"({"heal_batch": 0, "eval": ")", text, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "'heal_batch'"},
  };
  for (const Case& c : cases) {
    v1::Job job;
    const grpc::Status st = Submit(c.kind, c.kind == v1::VERIFY ? converted.id() : source.id(),
                                   c.params, &job);
    EXPECT_EQ(st.error_code(), c.code) << c.params << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.phrase)) << c.params;
  }
  // Heal: sequence lengths, kd without a teacher, data that is no text, and a batch that
  // needs far more memory than the machine has (it tried to allocate 274 GB).
  const std::string heal = absl::StrCat(R"("teacher": ")", source.id(), R"(", "data": ")", text,
                                        R"(")");
  const std::vector<Case> heals = {
      {v1::HEAL, "{" + heal + R"(, "seq_len": 0})", grpc::StatusCode::INVALID_ARGUMENT, "--seq-len"},
      {v1::HEAL, "{" + heal + R"(, "seq_len": 1})", grpc::StatusCode::INVALID_ARGUMENT, "--seq-len"},
      {v1::HEAL, "{" + heal + R"(, "seq_len": -5})", grpc::StatusCode::INVALID_ARGUMENT, "--seq-len"},
      {v1::HEAL, "{" + heal + R"(, "seq_len": 1000000000})", grpc::StatusCode::INVALID_ARGUMENT,
       "context"},
      {v1::HEAL, with_text(R"({"data": ")", text, R"("})"), grpc::StatusCode::INVALID_ARGUMENT,
       "needs a --teacher"},
      {v1::HEAL, absl::StrCat(R"({"teacher": ")", source.id(), R"(", "data": ")", folder, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "not a regular file"},
      {v1::HEAL, absl::StrCat(R"({"teacher": ")", source.id(), R"(", "data": ")", binary, R"("})"),
       grpc::StatusCode::INVALID_ARGUMENT, "binary file"},
      {v1::HEAL, "{" + heal + R"(, "batch": 65536, "seq_len": 2048})",
       grpc::StatusCode::RESOURCE_EXHAUSTED, "does not fit"},
  };
  for (const Case& c : heals) {
    v1::Job job;
    const grpc::Status st = Submit(c.kind, converted.id(), c.params, &job);
    EXPECT_EQ(st.error_code(), c.code) << c.params << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.phrase)) << c.params;
  }
  // Nothing was queued by any of them.
  v1::ListJobsResponse resp;
  ASSERT_TRUE(ListJobs(*stub_, 0, 0, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 1);  // ConvertStories' convert
}

// The smaller defects: a refused submission leaves no job, an offset near 2^63 is the
// client's error, a huge id is not echoed whole, outside paths answer alike whether or
// not they exist, "..foo.gguf" is an ordinary name, the same content registered under
// another path is the same entry, and paging survives the deletion of the job its
// token names.
TEST_F(HardeningTest, SmallerDefects) {
  server_.reset();
  StartServer("", /*max_queued_jobs=*/1);
  v1::Checkpoint source, converted;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  // Queue of one: one running, one waiting, the third refused and not listed.
  v1::Job running, waiting, refused;
  const std::string verify = R"({"prompt_tokens": 200, "decode_tokens": 400, "dtype": "both"})";
  ASSERT_TRUE(Submit(v1::VERIFY, source.id(), verify, &running).ok());
  ASSERT_EQ(WaitUntil(*stub_, running.id(), 30, [](const v1::Job& j) {
              return j.state() == v1::RUNNING;
            }).state(), v1::RUNNING);
  ASSERT_TRUE(Submit(v1::VERIFY, source.id(), verify, &waiting).ok());
  const grpc::Status full = Submit(v1::VERIFY, source.id(), verify, &refused);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  v1::ListJobsResponse listed;
  ASSERT_TRUE(ListJobs(*stub_, 0, 0, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 2);
  for (const std::string& id : {running.id(), waiting.id()}) {
    EXPECT_TRUE(Cancel(id).ok());
  }
  // An upload chunk at offset 2^63 - 5: INVALID_ARGUMENT, not an overflow's INTERNAL.
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
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
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
  // Outside the allowed folders: the same answer for a file that exists and one that
  // does not.
  v1::Checkpoint ck;
  EXPECT_EQ(Register("/etc/passwd", &ck).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register("/etc/no-such-file.gguf", &ck).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // "..foo.gguf" inside an allowed folder is a name like any other; registering the
  // same bytes there keeps the first record's path.
  const fs::path dotted = dir_ / "data" / "..foo.gguf";
  fs::copy_file(lrkv::testing::StoriesModelPath(), dotted);
  const grpc::Status dotted_st = Register(dotted.string(), &ck);
  ASSERT_TRUE(dotted_st.ok()) << dotted_st.error_message();
  EXPECT_EQ(ck.id(), source.id());
  // Paging: the job a page token names is deleted before the next page is asked for.
  server_.reset();
  StartServer();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::Job job;
    ASSERT_TRUE(Submit(v1::BENCH, source.id(),
                       R"({"context": [16], "batch": 1, "iterations": 1})", &job)
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
  EXPECT_EQ(record->path, (dir_ / "data" / "checkpoints" / (source.id() + ".gguf")).string());
}

// A checkpoint whose files parse but whose tensors do not make the model its config
// describes (one missing, one misshaped, one left over) is refused at registration and
// at upload alike, naming the tensor, not in its first job.
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
         v->erase(std::remove_if(v->begin(), v->end(), [](const TensorView& t) {
                    return t.name == "model.layers.1.mlp.up_proj.weight";
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
    ASSERT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), damaged, {}).ok());
    std::ofstream(dir / "config.json") << ConfigToHfJson(c);
    v1::Checkpoint ck;
    const grpc::Status reg = Register(dir.string(), &ck);
    EXPECT_EQ(reg.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << reg.error_message();
    EXPECT_THAT(reg.error_message(), HasSubstr(k.phrase));
  }
  // The undamaged set registers.
  const fs::path good = dir_ / "data" / "good";
  fs::create_directories(good);
  ASSERT_TRUE(WriteSafetensors((good / "model.safetensors").string(), *views, {}).ok());
  std::ofstream(good / "config.json") << ConfigToHfJson(c);
  v1::Checkpoint ck;
  const grpc::Status ok = Register(good.string(), &ck);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

// Check then use: a registered folder is replaced by a symlink to an outside folder
// holding another model. Jobs read the copy staged at registration (the outside model
// is never opened), and registering through a symlink that leads outside is refused.
TEST_F(HardeningTest, JobsReadTheRegisteredCopyNotWhatThePathBecameLater) {
  const fs::path inside = dir_ / "data" / "mine";
  const fs::path outside = dir_ / "outside";  // not an allowed folder
  fs::create_directories(inside);
  fs::create_directories(outside);
  // Inside: the converted stories model; outside: the stories source as GGUF, so that a
  // job that read it would see a dense model and report no factored mode.
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const fs::path artifact = dir_ / "data" / "artifacts";
  fs::path converted_dir;
  for (const auto& e : fs::directory_iterator(artifact)) converted_dir = e.path();
  fs::copy(converted_dir, inside / "ckpt");
  v1::Checkpoint mine;
  ASSERT_TRUE(Register((inside / "ckpt").string(), &mine).ok());
  EXPECT_EQ(mine.id(), converted.id());  // the same content, the same entry
  fs::copy_file(lrkv::testing::StoriesModelPath(), outside / "model.gguf");
  // Swap: the folder becomes a symlink to the outside one.
  fs::remove_all(inside / "ckpt");
  fs::create_directory_symlink(outside, inside / "ckpt");
  v1::Job job;
  ASSERT_TRUE(Submit(v1::VERIFY, mine.id(), R"({"prompt_tokens": 8, "decode_tokens": 4})", &job)
                  .ok());
  const v1::Job done = WaitDone(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(job.id(), &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  EXPECT_EQ(json["variant"], "lrkv r=2");  // the registered model, not the outside one
  EXPECT_EQ(json["checkpoint"].get<std::string>().find((dir_ / "data" / "checkpoints").string()),
            0u);
  // Registering through that symlink now: refused, the outside file unread.
  v1::Checkpoint through;
  const grpc::Status st = Register((inside / "ckpt").string(), &through);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr("gguf")));
}

// The same for a job's text inputs: an eval file checked at submission and replaced by a
// symlink to an outside binary before the job runs is not what the job reads.
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
  // One worker: a long verify runs first, so the convert waits in the queue meanwhile.
  v1::Job blocker, convert;
  ASSERT_TRUE(Submit(v1::VERIFY, source.id(),
                     R"({"prompt_tokens": 200, "decode_tokens": 400, "dtype": "both"})", &blocker)
                  .ok());
  ASSERT_TRUE(Submit(v1::CONVERT, source.id(),
                     absl::StrCat(R"({"rank": 2, "eval": ")", text.string(), R"("})"), &convert)
                  .ok());
  EXPECT_NE(convert.params_json().find((dir_ / "data" / "inputs").string()), std::string::npos)
      << convert.params_json();
  fs::remove(text);
  fs::create_symlink(outside, text);
  ASSERT_TRUE(Cancel(blocker.id()).ok());
  const v1::Job done = WaitDone(convert.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(convert.id(), &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  // Exactly the five stories' tokens (the outside file would give others, or fail).
  auto ckpt = Checkpoint::Open(lrkv::testing::StoriesModelPath());
  ASSERT_TRUE(ckpt.ok());
  int64_t tokens = 0;
  for (int i = 0; i < 5; ++i) tokens += (*ckpt)->tokenizer()->Encode((*docs)[i]).size();
  EXPECT_EQ(json["eval_tokens"].get<int64_t>(), tokens);
}

// A verify's `source` named by path is registered at submission (staged by content, as
// RegisterCheckpoint stages it): the job reads that copy even when the path is replaced
// by a symlink to an outside file before it runs. Named by id it is that checkpoint;
// neither an id nor an absolute path is INVALID_ARGUMENT; a path outside the allowed
// folders is PERMISSION_DENIED at submission.
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
  ASSERT_TRUE(Submit(v1::VERIFY, source.id(),
                     R"({"prompt_tokens": 200, "decode_tokens": 400, "dtype": "both"})", &blocker)
                  .ok());
  ASSERT_TRUE(Submit(v1::VERIFY, converted.id(),
                     absl::StrCat(R"({"prompt_tokens": 8, "decode_tokens": 4, "source": ")",
                                  src.string(), R"("})"),
                     &verify)
                  .ok());
  EXPECT_NE(verify.params_json().find((dir_ / "data" / "checkpoints" / source.id()).string()),
            std::string::npos)
      << verify.params_json();  // the same content as the registered source: its entry
  fs::remove(src);
  fs::create_symlink(outside, src);
  ASSERT_TRUE(Cancel(blocker.id()).ok());
  const v1::Job done = WaitDone(verify.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(verify.id(), &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  EXPECT_TRUE(json["head_diversity"].contains("source_centred"));  // the source was read
  EXPECT_EQ(json["source"].get<std::string>().find((dir_ / "data" / "checkpoints").string()),
            0u);

  v1::Job by_id;
  ASSERT_TRUE(Submit(v1::VERIFY, converted.id(),
                     absl::StrCat(R"({"prompt_tokens": 8, "decode_tokens": 4, "source": ")",
                                  source.id(), R"("})"),
                     &by_id)
                  .ok());
  EXPECT_NE(by_id.params_json().find((dir_ / "data" / "checkpoints").string()),
            std::string::npos);
  EXPECT_EQ(WaitDone(by_id.id()).state(), v1::SUCCEEDED);
  v1::Job refused;
  grpc::Status st = Submit(v1::VERIFY, converted.id(), R"({"source": "no-such-id"})", &refused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("'source'"));
  st = Submit(v1::VERIFY, converted.id(),
              absl::StrCat(R"({"source": ")", outside.string(), R"("})"), &refused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
}

// The same malformed file given both ways in — registered (a folder with its config, or
// the .gguf) and uploaded — gets the same code and names the same problem (they used
// to differ: the two paths validated differently).
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
    EXPECT_EQ(reg.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << reg.error_message();
    EXPECT_EQ(up.error_code(), reg.error_code()) << up.error_message();
    EXPECT_THAT(reg.error_message(), HasSubstr(phrase));
    EXPECT_THAT(up.error_message(), HasSubstr(phrase));
    ++compared;
  }
  EXPECT_GE(compared, 15);
}

}  // namespace
}  // namespace lrkv::service
