// The service's SQLite store: migrations, checkpoints, the job state machine,
// ordered paging with filters, crash recovery of running jobs, events and
// result rows.
#include "service/store.h"

#include <google/protobuf/util/json_util.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/service/faulty_sqlite_vfs.h"
#include "tests/test_paths.h"

namespace lrkv::service {
namespace {

using ::testing::HasSubstr;

// Rows of message M from a JSON array, as lrkvd's reports print them
// (protobuf's parser: a misspelt field fails the test).
template <typename M>
std::vector<M> RowsFrom(const std::string& json_array) {
  std::vector<M> rows;
  const nlohmann::json parsed = nlohmann::json::parse(json_array);
  for (const auto& row : parsed) {
    M m;
    EXPECT_TRUE(
        google::protobuf::util::JsonStringToMessage(row.dump(), &m).ok())
        << row.dump();
    rows.push_back(std::move(m));
  }
  return rows;
}

std::unique_ptr<Store> OpenFresh(const std::string& name) {
  const auto dir = lrkv::testing::FreshTempDir(name);
  auto store = Store::Open((dir / "lrkv.db").string());
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

JobRecord Job(const std::string& id, int64_t created,
              const std::string& kind = "convert") {
  JobRecord j;
  j.id = id;
  j.kind = kind;
  j.checkpoint_id = "ck1";
  j.params_json = "{}";
  j.created_at = created;
  return j;
}

TEST(Store, MigratesOnceAndReopens) {
  const auto dir = lrkv::testing::FreshTempDir("store_reopen");
  const std::string path = (dir / "lrkv.db").string();
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->schema_version(), Store::kSchemaVersion);
    ASSERT_TRUE((*s)->CreateJob(Job("a", 1)).ok());
  }
  auto again = Store::Open(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->GetJob("a")->kind, "convert");
  EXPECT_EQ(*(*again)->IntegrityCheck(), "ok");
}

// A version 4 database (verification_checks.check_name) keeps its checks
// through migration 5, which names the columns as the proto's fields.
TEST(Store, AVersion4DatabaseKeepsItsChecks) {
  const auto dir = lrkv::testing::FreshTempDir("store_v4");
  const std::string path = (dir / "lrkv.db").string();
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->CreateJob(Job("v", 1, "verify")).ok());
    ASSERT_TRUE((*s)->AddRows("v", RowsFrom<v1::Check>(R"([
                    {"name": "plane fp32", "passed": true, "max_rel": 1e-6,
                     "verdict": "EQUIVALENT"}])"))
                    .ok());
  }
  {
    // Version 5 differs from 4 only by that column's name: undone here.
    auto db = Database::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)
                    ->Execute("ALTER TABLE verification_checks RENAME COLUMN "
                              "name TO check_name; UPDATE schema_version SET "
                              "version = 4;")
                    .ok());
  }
  auto again = Store::Open(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->schema_version(), 5);
  auto checks = (*again)->Rows<v1::Check>("v");
  ASSERT_TRUE(checks.ok()) << checks.status();
  ASSERT_EQ(checks->size(), 1u);
  EXPECT_EQ(checks->front().name(), "plane fp32");
  EXPECT_DOUBLE_EQ(checks->front().max_rel(), 1e-6);
  EXPECT_EQ(*(*again)->IntegrityCheck(), "ok");
}

TEST(Store, CheckpointsAndUnknownIds) {
  auto s = OpenFresh("store_ckpt");
  CheckpointRecord c{"sha", "gguf", "llama", "/data/x.gguf", 1185376, 10};
  ASSERT_TRUE(s->PutCheckpoint(c).ok());
  EXPECT_EQ(s->GetCheckpoint("sha")->bytes, 1185376);
  EXPECT_EQ(s->GetCheckpoint("nope").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s->GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->DeleteJob("nope").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s->CreateJob(Job("j", 1)).ok());
  EXPECT_EQ(s->CreateJob(Job("j", 2)).code(), absl::StatusCode::kAlreadyExists);
}

TEST(Store, JobStateMachine) {
  auto s = OpenFresh("store_states");
  ASSERT_TRUE(s->CreateJob(Job("j", 1)).ok());
  EXPECT_EQ(s->TransitionJob("j", JobState::kSucceeded, 2).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->TransitionJob("j", JobState::kRunning, 3).ok());
  auto running = s->GetJob("j");
  EXPECT_EQ(running->attempts, 1);
  EXPECT_EQ(running->started_at, 3);
  ASSERT_TRUE(s->TransitionJob("j", JobState::kFailed, 4, "boom").ok());
  auto failed = s->GetJob("j");
  EXPECT_EQ(failed->state, JobState::kFailed);
  EXPECT_EQ(failed->finished_at, 4);
  EXPECT_EQ(failed->error, "boom");
  auto st = s->TransitionJob("j", JobState::kRunning, 5);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("is failed"));
}

TEST(Store, ListsInOrderWithFiltersAndPages) {
  auto s = OpenFresh("store_list");
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(s->CreateJob(Job("job" + std::to_string(i), 100 - i % 3,
                                 i % 2 ? "verify" : "convert"))
                    .ok());
  }
  std::vector<std::string> seen;
  std::string token;
  do {
    auto page = s->ListJobs({}, 3, token);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& j : page->jobs) seen.push_back(j.id);
    token = page->next_page_token;
  } while (!token.empty());
  // created_at 98: job2, job5; 99: job1, job4; 100: job0, job3, job6.
  EXPECT_THAT(seen, ::testing::ElementsAre("job2", "job5", "job1", "job4",
                                           "job0", "job3", "job6"));
  JobFilter f;
  f.kind = "verify";
  auto verify = s->ListJobs(f, 10, "");
  ASSERT_TRUE(verify.ok());
  EXPECT_EQ(verify->jobs.size(), 3u);
  EXPECT_EQ(s->ListJobs({}, 0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->ListJobs({}, 2, "missing").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Store, RecoveryRequeuesRunningJobsUntilTheirAttemptsRunOut) {
  auto s = OpenFresh("store_recover");
  ASSERT_TRUE(s->CreateJob(Job("young", 1)).ok());
  ASSERT_TRUE(s->CreateJob(Job("old", 2)).ok());
  ASSERT_TRUE(s->CreateJob(Job("done", 3)).ok());
  ASSERT_TRUE(s->TransitionJob("young", JobState::kRunning, 10).ok());
  for (int i = 0; i < 3; ++i) {  // three attempts already
    ASSERT_TRUE(s->TransitionJob("old", JobState::kRunning, 10).ok());
    if (i < 2) ASSERT_TRUE(s->TransitionJob("old", JobState::kQueued, 10).ok());
  }
  ASSERT_TRUE(s->TransitionJob("done", JobState::kRunning, 10).ok());
  ASSERT_TRUE(s->TransitionJob("done", JobState::kSucceeded, 11).ok());
  auto touched = s->RecoverRunningJobs(/*max_attempts=*/3, 20);
  ASSERT_TRUE(touched.ok());
  EXPECT_EQ(*touched, 2);
  EXPECT_EQ(s->GetJob("young")->state, JobState::kQueued);
  EXPECT_EQ(s->GetJob("old")->state, JobState::kFailed);
  EXPECT_THAT(s->GetJob("old")->error, HasSubstr("gave up after 3 attempts"));
  EXPECT_EQ(s->GetJob("done")->state, JobState::kSucceeded);
}

TEST(Store, EventsAndResultsFollowTheirJob) {
  auto s = OpenFresh("store_events");
  ASSERT_TRUE(s->CreateJob(Job("j", 1, "heal")).ok());
  for (int i = 1; i <= 3; ++i) {
    JobEvent e;
    e.at = i;
    e.stage = "heal";
    e.step = i;
    e.total = 3;
    if (i > 1) e.loss = 1.0 / i;
    e.message = "step";
    EXPECT_EQ(*s->AppendEvent("j", e), i);
  }
  auto tail = s->Events("j", 1);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->size(), 2u);
  EXPECT_DOUBLE_EQ(*(*tail)[0].loss, 0.5);
  ASSERT_TRUE(s->AddRows("j", RowsFrom<v1::Check>(R"([
           {"name": "plane fp32", "passed": true, "max_rel": 6.9e-6, "cos_dist": 1e-12,
            "verdict": "EQUIVALENT", "error": 1.2e-6, "bound": 2.1e-6, "ratio": 0.57},
           {"name": "naive fp32", "passed": true, "max_rel": 3.9, "cos_dist": 1.4,
            "detail": "control", "verdict": "expected NOT EQUIVALENT: confirmed",
            "error": 1.3, "bound": 1.3e-6, "ratio": 1e6},
           {"name": "partial fp32", "passed": false, "detail": "not a partial model",
            "verdict": "n/a"}])"))
                  .ok());
  {
    auto rows = s->Rows<v1::Check>("j");
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), 3u);
    EXPECT_EQ((*rows)[1].verdict(), "n/a");  // partial, never stored as a pass
    EXPECT_FALSE((*rows)[1].passed());
    EXPECT_DOUBLE_EQ((*rows)[2].ratio(), 0.57);
    EXPECT_DOUBLE_EQ((*rows)[2].max_rel(), 6.9e-6);
    EXPECT_EQ((*rows)[2].verdict(), "EQUIVALENT");
    EXPECT_EQ((*rows)[0].detail(), "control");
  }
  ASSERT_TRUE(s->AddRows("j", RowsFrom<v1::LossPoint>(R"([
                  {"step": 1, "kind": "step", "loss": 1.1, "lr": 1e-3},
                  {"step": 2, "kind": "step", "loss": 0.9, "lr": 2e-3}])"))
                  .ok());
  EXPECT_EQ(s->Rows<v1::Check>("j")->front().name(),
            "naive fp32");  // ordered by name
  EXPECT_EQ(s->Rows<v1::LossPoint>("j")->size(), 2u);
  EXPECT_DOUBLE_EQ(s->Rows<v1::LossPoint>("j")->back().lr(), 2e-3);
  // An event for an unknown job violates the foreign key.
  EXPECT_FALSE(s->AppendEvent("ghost", JobEvent()).ok());
  ASSERT_TRUE(s->DeleteJob("j").ok());
  EXPECT_TRUE(s->Events("j", 0)->empty());
  EXPECT_TRUE(s->Rows<v1::LossPoint>("j")->empty());
}

TEST(Store, MeasurementTablesRoundTripInOrderAndFollowTheirJob) {
  auto s = OpenFresh("store_measurements");
  ASSERT_TRUE(s->CreateJob(Job("p", 1, "pipeline")).ok());
  ConversionRow c;
  c.config = "lrkv r=2";
  c.cache_ratio = 0.5;
  c.kv_param_ratio = 0.625;
  c.wall_seconds = 1.5;
  c.layers = {{1, 0.2, 0.3}, {0, 0.1, 0.4}};
  ASSERT_TRUE(s->AddConversion("p", c).ok());
  ASSERT_TRUE(s->AddRows("p", RowsFrom<v1::CacheRow>(R"([
                  {"engine": "plane", "variant": "lrkv r=2", "tokens": 48,
                   "used_bytes": 1920, "formula_bytes": 1920},
                  {"engine": "expanded", "variant": "lrkv r=2", "tokens": 48,
                   "used_bytes": 3840, "formula_bytes": 3840}])"))
                  .ok());
  ASSERT_TRUE(s->AddRows("p", RowsFrom<v1::LatencyRow>(R"([
                  {"variant": "source", "engine": "expanded", "context": 512,
                   "median_ms": 2.0, "ratio_to_mha": 1.0, "tokens_per_second": 500},
                  {"variant": "converted", "engine": "plane", "context": 128,
                   "median_ms": 1.0, "ratio_to_mha": 0.5, "tokens_per_second": 1000}])"))
                  .ok());
  ASSERT_TRUE(s->AddRows("p", RowsFrom<v1::Evaluation>(R"([
                  {"label": "before healing", "tokens": 900, "perplexity": 21.8},
                  {"label": "after healing", "tokens": 900, "perplexity": 5.9}])"))
                  .ok());
  CompareRow r;  // the study's own row type, stored whole
  r.model = "stories260K";
  r.budget = 0.5;
  r.variant = "mla";
  r.rope_mode = "reconstruct";
  r.config = "mla d_c=32";
  r.ppl_before = 4.3;
  r.verdict = "n/a";
  ASSERT_TRUE(s->AddComparison("p", r).ok());
  r.variant = "lrkv";
  r.ppl_after = 4.1;
  r.kl_mean = 0.2;
  r.heal_kept_step = 30;
  r.verdict = "EQUIVALENT";
  r.verify_error = 5.8e-7;
  r.verify_bound = 1.4e-6;
  r.step_context = 2048;
  r.madds_per_step = 4096;
  ASSERT_TRUE(s->AddComparison("p", r).ok());
  auto conv = s->Conversions("p");
  ASSERT_TRUE(conv.ok());
  ASSERT_EQ(conv->size(), 1u);
  ASSERT_EQ(conv->front().layers.size(), 2u);
  EXPECT_EQ(conv->front().layers[0].layer, 0);  // ordered by layer
  EXPECT_DOUBLE_EQ(conv->front().layers[0].v_rel, 0.4);
  EXPECT_EQ(s->Rows<v1::CacheRow>("p")->front().engine(), "expanded");
  EXPECT_EQ(s->Rows<v1::CacheRow>("p")->front().used_bytes(), 3840);
  EXPECT_EQ(s->Rows<v1::LatencyRow>("p")->front().context(), 128);
  EXPECT_DOUBLE_EQ(s->Rows<v1::LatencyRow>("p")->front().tokens_per_second(),
                   1000);
  EXPECT_EQ(s->Rows<v1::Evaluation>("p")->front().label(), "after healing");
  EXPECT_DOUBLE_EQ(s->Rows<v1::Evaluation>("p")->front().perplexity(), 5.9);
  auto cmp = s->Comparison("p");
  ASSERT_EQ(cmp->size(), 2u);
  EXPECT_EQ((*cmp)[0].variant, "lrkv");
  EXPECT_DOUBLE_EQ(*(*cmp)[0].ppl_after, 4.1);
  EXPECT_EQ((*cmp)[0].heal_kept_step, 30);
  EXPECT_EQ((*cmp)[0].verdict, "EQUIVALENT");
  EXPECT_DOUBLE_EQ((*cmp)[0].verify_error, 5.8e-7);
  EXPECT_DOUBLE_EQ((*cmp)[0].verify_bound, 1.4e-6);
  EXPECT_EQ((*cmp)[0].step_context, 2048);
  EXPECT_EQ((*cmp)[0].madds_per_step, 4096);
  EXPECT_FALSE((*cmp)[1].ppl_after.has_value());  // NULL stays absent
  EXPECT_FALSE((*cmp)[1].heal_kept_step.has_value());
  ASSERT_TRUE(s->DeleteJob("p").ok());
  EXPECT_TRUE(s->Conversions("p")->empty());
  EXPECT_TRUE(s->Rows<v1::CacheRow>("p")->empty());
  EXPECT_TRUE(s->Rows<v1::LatencyRow>("p")->empty());
  EXPECT_TRUE(s->Rows<v1::Evaluation>("p")->empty());
  EXPECT_TRUE(s->Comparison("p")->empty());
  EXPECT_EQ(*s->IntegrityCheck(), "ok");
}

// A job's end survives a full disk (lrkvd integrity issue, item 3): with every write of
// the database refused, FinishJob keeps the end in memory, every reader sees it, the job
// cannot be moved on, and FlushPendingEnds writes it once writes succeed again.
TEST(StoreJobEnd, AnEndThatCannotBeWrittenIsShownAndWrittenLater) {
  lrkv::testing::FaultySqliteVfs::Install();
  const auto dir = lrkv::testing::FreshTempDir("store_job_end");
  const std::string path = (dir / "lrkv.db").string();
  auto opened = Store::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& s = **opened;
  ASSERT_TRUE(s.CreateJob(Job("j", 1)).ok());
  ASSERT_TRUE(s.CreateJob(Job("other", 2)).ok());
  ASSERT_TRUE(s.TransitionJob("j", JobState::kRunning, 3).ok());
  ASSERT_TRUE(s.TransitionJob("other", JobState::kRunning, 3).ok());

  lrkv::testing::FaultySqliteVfs::fail_writes() = true;
  const int refused_before = lrkv::testing::FaultySqliteVfs::refused();
  const absl::Status ended = s.FinishJob("j", JobState::kFailed, 4, "No space left on device");
  EXPECT_EQ(ended.code(), absl::StatusCode::kResourceExhausted) << ended;
  EXPECT_GT(lrkv::testing::FaultySqliteVfs::refused(), refused_before);  // the write was tried
  EXPECT_EQ(s.PendingEnds(), 1u);
  auto j = s.GetJob("j");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, JobState::kFailed);
  EXPECT_EQ(j->finished_at, 4);
  EXPECT_EQ(j->error, "No space left on device");
  JobFilter running;
  running.state = JobState::kRunning;
  auto page = s.ListJobs(running, 10, "");
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);  // "j" no longer lists as running
  EXPECT_EQ(page->jobs[0].id, "other");
  EXPECT_EQ(s.TransitionJob("j", JobState::kQueued, 5).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s.FlushPendingEnds().ok());  // still no space
  EXPECT_EQ(s.PendingEnds(), 1u);

  lrkv::testing::FaultySqliteVfs::fail_writes() = false;
  EXPECT_TRUE(s.FlushPendingEnds().ok());
  EXPECT_EQ(s.PendingEnds(), 0u);
  opened->reset();
  auto reopened = Store::Open(path);  // what a restart reads
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->GetJob("j")->state, JobState::kFailed);
  EXPECT_EQ((*reopened)->GetJob("j")->error, "No space left on device");
  EXPECT_EQ((*reopened)->GetJob("other")->state, JobState::kRunning);
}

// The reserve: a store opened with one keeps that many bytes in a file beside the
// database and gives them up when an end cannot be written, so the end is written at
// once; the reserve comes back once there is room.
TEST(StoreJobEnd, TheReserveIsGivenUpSoThatTheEndIsWritten) {
  lrkv::testing::FaultySqliteVfs::Install();
  const auto dir = lrkv::testing::FreshTempDir("store_reserve");
  const std::string path = (dir / "lrkv.db").string();
  const std::string reserve = path + ".reserve";
  auto opened = Store::Open(path, 256 << 10);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& s = **opened;
  ASSERT_EQ(std::filesystem::file_size(reserve), 256u << 10);
  ASSERT_TRUE(s.CreateJob(Job("j", 1)).ok());
  ASSERT_TRUE(s.TransitionJob("j", JobState::kRunning, 2).ok());
  // The disk is full until the reserve is gone.
  lrkv::testing::FaultySqliteVfs::fail_while_exists() = reserve;
  EXPECT_TRUE(s.FinishJob("j", JobState::kCancelled, 3, "cancelled").ok());
  lrkv::testing::FaultySqliteVfs::fail_while_exists().clear();
  EXPECT_FALSE(std::filesystem::exists(reserve));
  EXPECT_EQ(s.PendingEnds(), 0u);
  EXPECT_TRUE(s.FlushPendingEnds().ok());
  EXPECT_EQ(std::filesystem::file_size(reserve), 256u << 10);  // back
  opened->reset();
  auto reopened = Store::Open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->GetJob("j")->state, JobState::kCancelled);
}

// A job whose end waits in memory can be deleted: the row and the pending end go.
TEST(StoreJobEnd, AJobWhoseEndWaitsCanBeDeleted) {
  lrkv::testing::FaultySqliteVfs::Install();
  auto s = OpenFresh("store_pending_delete");
  ASSERT_TRUE(s->CreateJob(Job("j", 1)).ok());
  ASSERT_TRUE(s->TransitionJob("j", JobState::kRunning, 2).ok());
  lrkv::testing::FaultySqliteVfs::fail_writes() = true;
  EXPECT_FALSE(s->FinishJob("j", JobState::kFailed, 3, "full").ok());
  EXPECT_EQ(s->DeleteJob("j").code(), absl::StatusCode::kResourceExhausted);
  lrkv::testing::FaultySqliteVfs::fail_writes() = false;
  EXPECT_TRUE(s->DeleteJob("j").ok());
  EXPECT_EQ(s->PendingEnds(), 0u);
  EXPECT_EQ(s->GetJob("j").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->FinishJob("j", JobState::kFailed, 4).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lrkv::service
