// The service's SQLite store: checkpoints, jobs (state machine, attempts), job
// events, and result rows (verification checks, loss curves), with a
// schema-version table and ordered migrations. One writer connection shared by
// every thread under a mutex; every multi-row select has an ORDER BY.
#ifndef LRKV_SERVICE_STORE_H_
#define LRKV_SERVICE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lrkv/v1/lrkv.pb.h"
#include "service/sqlite_db.h"
#include "study/compare_row.h"

namespace lrkv::service {

// An id as error messages echo it: at most 64 characters (a 100 kB id in a NOT_FOUND
// message made the reply too big to send).
std::string Shown(const std::string& id);

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };
const char* JobStateName(JobState s);
absl::StatusOr<JobState> ParseJobState(const std::string& name);

struct CheckpointRecord {
  std::string id;            // sha256 of the file(s)
  std::string format;        // gguf | safetensors
  std::string architecture;  // llama | qwen2 | qwen3
  std::string path;          // where the artifact lives
  int64_t bytes = 0;
  int64_t created_at = 0;  // unix seconds
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

struct ConversionRow {
  std::string config;  // e.g. "lrkv r=2"
  double cache_ratio = 0, kv_param_ratio = 0, wall_seconds = 0;
  struct Layer {
    int64_t layer = 0;
    double k_rel = 0, v_rel = 0;
  };
  std::vector<Layer> layers;
};

class Store {
 public:
  // Opens (creating) `path` and migrates the schema to the current version. With
  // `reserve_bytes` > 0 the store keeps that much disk in `path`.reserve (created now
  // when there is room), given up when a job's end cannot be written for lack of space.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     int64_t reserve_bytes = 0);
  static constexpr int kSchemaVersion = 5;
  int schema_version() const { return version_; }

  absl::Status PutCheckpoint(const CheckpointRecord& c);
  absl::StatusOr<CheckpointRecord> GetCheckpoint(
      const std::string& id);  // NotFound

  absl::Status CreateJob(
      const JobRecord& job);  // AlreadyExists on a duplicate id
  absl::StatusOr<JobRecord> GetJob(const std::string& id);  // NotFound
  // Ordered by creation time then id; page_token is the last id of the previous
  // page.
  absl::StatusOr<JobPage> ListJobs(const JobFilter& filter, int64_t page_size,
                                   const std::string& page_token);
  // Moves a job to `to` if the transition is allowed (queued→running→done,
  // queued/running→cancelled, running→queued on recovery); FailedPrecondition
  // otherwise.
  absl::Status TransitionJob(const std::string& id, JobState to, int64_t now,
                             const std::string& error = "");
  // Ends a running or queued job (succeeded, failed, cancelled) so that its end
  // survives a full disk: when the write fails, the reserve is given up and the write
  // tried again; if it still fails, the end is kept in memory — GetJob and ListJobs
  // show it, TransitionJob refuses to move the job on — and written by
  // FlushPendingEnds. Returns that write's error (the end took effect regardless) or
  // TransitionJob's refusal.
  absl::Status FinishJob(const std::string& id, JobState to, int64_t now,
                         const std::string& error = "");
  // Writes the ends kept in memory (and re-creates a reserve given up); OK when none is
  // left. The runner calls it every second and at shutdown.
  absl::Status FlushPendingEnds();
  // Ends kept in memory, waiting for disk space.
  size_t PendingEnds();
  // Removes the job (NotFound); an end kept in memory goes with it.
  absl::Status DeleteJob(const std::string& id);
  // Removes every result row of job `id` (verification, loss curve, conversions,
  // caches, latency, evaluations, comparisons), keeping the job and its events: an
  // attempt starts from none, and a cancelled or failed one leaves none.
  absl::Status ClearResults(const std::string& id);
  // Rows of result table `table` (one ClearResults empties) for job `id`; InvalidArgument
  // for another table name.
  absl::StatusOr<int64_t> CountRows(const std::string& table, const std::string& id);
  // Crash recovery: jobs left running go back to the queue (attempts + 1), or
  // fail once they have used `max_attempts`. Returns how many were touched.
  absl::StatusOr<int64_t> RecoverRunningJobs(int64_t max_attempts, int64_t now);

  absl::StatusOr<int64_t> AppendEvent(const std::string& job_id,
                                      const JobEvent& e);
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id,
                                               int64_t after_seq);
  // The newest event (GetJob's progress) without reading the others.
  absl::StatusOr<std::optional<JobEvent>> LastEvent(const std::string& job_id);

  // A job's result rows described by their proto message (proto_rows.h):
  // verification checks (v1::Check), loss curves (v1::LossPoint), cache and
  // latency measurements (v1::CacheRow, v1::LatencyRow) and evaluations
  // (v1::Evaluation), each a table with a column per field. AddRows replaces
  // rows with the same key; Rows returns a job's rows in the table's order.
  template <typename M>
  absl::Status AddRows(const std::string& job_id, const std::vector<M>& rows);
  template <typename M>
  absl::StatusOr<std::vector<M>> Rows(const std::string& job_id);

  // Measurement tables (store_results.cc); each Add replaces rows with the same
  // key.
  absl::Status AddConversion(const std::string& job_id,
                             const ConversionRow& row);
  absl::StatusOr<std::vector<ConversionRow>> Conversions(
      const std::string& job_id);
  absl::Status AddComparison(const std::string& job_id,
                             const CompareRow& row);
  absl::StatusOr<std::vector<CompareRow>> Comparison(
      const std::string& job_id);

  // PRAGMA integrity_check; "ok" when healthy.
  absl::StatusOr<std::string> IntegrityCheck();

 private:
  explicit Store(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  absl::Status Migrate();
  // A job's end not yet written (FinishJob), shown over the row.
  struct PendingEnd {
    JobState state;
    int64_t finished_at;
    std::string error;
  };
  void ApplyPendingEnd(JobRecord* job) const;  // mu_ held
  // Writes `end` as the job's transition, giving up the reserve and trying once more
  // when the first write fails (mu_ held).
  absl::Status WriteEnd(const std::string& id, const PendingEnd& end);
  // The reserve file (store_job_end.cc): created up to reserve_bytes_ when there is
  // room; Release removes it and says whether there was one to free.
  void EnsureReserve();
  bool ReleaseReserve();
  std::unique_ptr<Database> db_;
  std::string reserve_path_;
  int64_t reserve_bytes_ = 0;
  std::map<std::string, PendingEnd> pending_ends_;
  int version_ = 0;
  // One connection serves every thread; each public method holds this for its
  // whole transaction (recursive: methods call each other).
  std::recursive_mutex mu_;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_STORE_H_
