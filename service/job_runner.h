// Runs queued jobs on worker threads by calling the core library: a bounded
// queue, N workers, results and events into the store, reports and per-job logs
// under the data directory, cancellation (queued jobs never start; running ones
// stop at their next step or stage and end CANCELLED), shutdown that puts the
// jobs it interrupts back in the queue, and re-queued jobs picked up at start.
#ifndef LRKV_SERVICE_JOB_RUNNER_H_
#define LRKV_SERVICE_JOB_RUNNER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "service/store.h"
#include "service/store_integrity.h"
#include "surgery/conversion_report.h"
#include "train/heal_job.h"
#include "verify/verify_report.h"

namespace lrkv::service {

struct RunnerOptions {
  /// Worker threads.
  int workers = 1;
  /// Jobs waiting at most; more are RESOURCE_EXHAUSTED.
  int64_t max_queue = 1024;
  /// Where artifacts (converted checkpoints) and reports are written.
  std::string data_dir;
};

class JobRunner {
 public:
  JobRunner(Store* store, RunnerOptions options);
  ~JobRunner();  // stops the workers
  // Starts the workers and queues every job the store holds as queued.
  absl::Status Start();
  absl::Status Enqueue(const std::string& job_id);
  // Marks a job cancelled: a queued job ends CANCELLED now, a running one when
  // it returns.
  absl::Status Cancel(const std::string& job_id);
  // Asks running jobs to stop (heal steps, study and pipeline stages check
  // between steps); a job stopped this way goes back to the queue for the next
  // start. Then joins the workers.
  void Stop();

  std::string ReportPath(const std::string& job_id) const;
  std::string ArtifactPath(const std::string& job_id) const;
  // The job's log: one line per stage, event and outcome.
  std::string LogPath(const std::string& job_id) const;

 private:
  void Work();
  // Writes the job ends the store keeps in memory (a full disk), every second.
  void FlushEnds();
  absl::Status Execute(const JobRecord& job);
  // convert → heal (when asked) → verify → bench, one artifact folder per job.
  absl::StatusOr<nlohmann::json> RunPipeline(const JobRecord& job,
                                             const CheckpointRecord& source);
  // Records a progress event (and a log line); Cancelled when the job should
  // stop.
  // Removes the job's artifacts folder, report and result rows.
  void DiscardResults(const std::string& id);
  absl::Status Stage(const std::string& job_id, const std::string& stage,
                     int64_t step, int64_t total, const std::string& message);
  // Cancellation (CancelJob) or shutdown asked for: checked between stages and
  // before every training step.
  bool StopRequested(const std::string& job_id);
  std::function<bool()> StopCheck(const std::string& job_id);
  void Log(const std::string& job_id, const std::string& line);
  // Results into the store's measurement tables.
  absl::Status StoreConversion(const std::string& job_id,
                               const ConversionReport& r);
  absl::Status StoreVerification(const std::string& job_id,
                                 const VerifyReport& r);
  absl::Status StoreEvaluations(const std::string& job_id, const HealReport& r);
  // A decode-kernel benchmark at the checkpoint's shape.
  absl::StatusOr<nlohmann::json> RunBench(const JobRecord& job,
                                          const CheckpointRecord& source);
  // The comparison study; its rows into comparison_rows and
  // latency_measurements.
  absl::StatusOr<nlohmann::json> RunCompare(const JobRecord& job,
                                            const CheckpointRecord& source);
  // Heals, streaming one event per step into the store and keeping the loss
  // curve.
  absl::StatusOr<HealReport> Heal(const std::string& job_id,
                                  const HealJobOptions& options);

  Store* store_;
  RunnerOptions options_;
  StoreIntegrity integrity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> cancelled_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::condition_variable cv_flush_;
  std::thread flusher_;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_JOB_RUNNER_H_
