// The service's SQLite store: checkpoints, jobs (state machine, attempts), job events,
// and result rows (verification checks, loss curves), with a schema-version table and
// ordered migrations. One writer connection shared by every thread under a mutex;
// every multi-row select has an ORDER BY.
#ifndef LRKV_SERVICE_STORE_H_
#define LRKV_SERVICE_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "service/sqlite_db.h"

namespace lrkv::service {

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };
const char* JobStateName(JobState s);
absl::StatusOr<JobState> ParseJobState(const std::string& name);

struct CheckpointRecord {
  std::string id;            // sha256 of the file(s)
  std::string format;        // gguf | safetensors
  std::string architecture;  // llama | qwen2 | qwen3
  std::string path;          // where the artifact lives
  int64_t bytes = 0;
  int64_t created_at = 0;    // unix seconds
};

struct JobRecord {
  std::string id;
  std::string kind;  // convert | heal | verify | bench | compare | pipeline
  std::string checkpoint_id;
  std::string params_json;
  JobState state = JobState::kQueued;
  int64_t attempts = 0;
  int64_t created_at = 0, started_at = 0, finished_at = 0;
  std::string error;
};

struct JobEvent {
  int64_t seq = 0;
  int64_t at = 0;
  std::string stage;
  int64_t step = 0, total = 0;
  std::optional<double> loss;
  std::string message;
};

struct JobFilter {
  std::optional<JobState> state;
  std::string kind;
  std::string checkpoint_id;
};

struct JobPage {
  std::vector<JobRecord> jobs;
  std::string next_page_token;  // empty on the last page
};

struct VerificationRow {
  std::string check;  // e.g. "plane fp32"
  bool passed = false;
  double max_rel = 0, cos_dist = 0;
  std::string detail;
};

struct LossRow {
  int64_t step = 0;
  std::string kind;  // step | eval
  double loss = 0, lr = 0;
};

class Store {
 public:
  // Opens (creating) `path` and migrates the schema to the current version.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  static constexpr int kSchemaVersion = 1;
  int schema_version() const { return version_; }

  absl::Status PutCheckpoint(const CheckpointRecord& c);
  absl::StatusOr<CheckpointRecord> GetCheckpoint(const std::string& id);  // NotFound

  absl::Status CreateJob(const JobRecord& job);  // AlreadyExists on a duplicate id
  absl::StatusOr<JobRecord> GetJob(const std::string& id);  // NotFound
  // Ordered by creation time then id; page_token is the last id of the previous page.
  absl::StatusOr<JobPage> ListJobs(const JobFilter& filter, int64_t page_size,
                                   const std::string& page_token);
  // Moves a job to `to` if the transition is allowed (queued→running→done,
  // queued/running→cancelled, running→queued on recovery); FailedPrecondition otherwise.
  absl::Status TransitionJob(const std::string& id, JobState to, int64_t now,
                             const std::string& error = "");
  absl::Status DeleteJob(const std::string& id);  // NotFound
  // Crash recovery: jobs left running go back to the queue (attempts + 1), or fail
  // once they have used `max_attempts`. Returns how many were touched.
  absl::StatusOr<int64_t> RecoverRunningJobs(int64_t max_attempts, int64_t now);

  absl::StatusOr<int64_t> AppendEvent(const std::string& job_id, const JobEvent& e);
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id, int64_t after_seq);

  absl::Status AddVerification(const std::string& job_id, const std::vector<VerificationRow>& rows);
  absl::StatusOr<std::vector<VerificationRow>> Verification(const std::string& job_id);
  absl::Status AddLossCurve(const std::string& job_id, const std::vector<LossRow>& rows);
  absl::StatusOr<std::vector<LossRow>> LossCurve(const std::string& job_id);

  // PRAGMA integrity_check; "ok" when healthy.
  absl::StatusOr<std::string> IntegrityCheck();

 private:
  explicit Store(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  absl::Status Migrate();
  std::unique_ptr<Database> db_;
  int version_ = 0;
  // One connection serves every thread; each public method holds this for its whole
  // transaction (recursive: methods call each other).
  std::recursive_mutex mu_;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_STORE_H_
