// Runs queued jobs on worker threads (see job_runner.h).
#include "service/job_runner.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "model/checkpoint.h"
#include "runtime/generate_bench.h"
#include "runtime/provenance.h"
#include "service/job_params.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// `text` with lrkvd's own paths under `data_dir` as a client names what they
// are: a staged checkpoint as "checkpoint <sha256>" (the id the API takes), a
// job's output as "artifact of job <id>" (what DownloadArtifact fetches),
// anything else relative to the data folder. A report is read by clients who
// never see that folder.
std::string UserFacingPaths(std::string text, const std::string& data_dir) {
  const std::string root = (fs::path(data_dir) / "").string();
  for (size_t at = text.find(root); at != std::string::npos;
       at = text.find(root, at)) {
    size_t end = at + root.size();
    while (end < text.size() && text[end] != ' ' && text[end] != '"' &&
           text[end] != '\'' && text[end] != ',' && text[end] != ')') {
      ++end;
    }
    const fs::path rel =
        fs::path(text.substr(at + root.size(), end - at - root.size()));
    auto part = rel.begin();
    std::string shown = rel.string();
    if (part != rel.end() && std::next(part) != rel.end()) {
      const std::string top = part->string(), entry = std::next(part)->string();
      if (top == "checkpoints") {
        shown = absl::StrCat("checkpoint ", fs::path(entry).stem().string());
      } else if (top == "artifacts") {
        shown = absl::StrCat("artifact of job ", entry);
      }
    }
    text.replace(at, end - at, shown);
    at += shown.size();
  }
  return text;
}

nlohmann::json UserFacingPaths(const nlohmann::json& value,
                               const std::string& data_dir) {
  if (value.is_string()) {
    return UserFacingPaths(value.get<std::string>(), data_dir);
  }
  if (!value.is_structured()) return value;
  nlohmann::json out = value;
  for (auto& item : out.items()) {
    item.value() = UserFacingPaths(item.value(), data_dir);
  }
  return out;
}

v1::Evaluation Evaluation(const std::string& label, int64_t tokens,
                          double perplexity) {
  v1::Evaluation e;
  e.set_label(label);
  e.set_tokens(tokens);
  e.set_perplexity(perplexity);
  return e;
}

v1::LatencyRow Latency(const std::string& variant, const std::string& engine,
                       int64_t context, double median_ms, double gbps,
                       double ratio_to_mha, double tokens_per_second) {
  v1::LatencyRow l;
  l.set_variant(variant);
  l.set_engine(engine);
  l.set_context(context);
  l.set_median_ms(median_ms);
  l.set_gbps(gbps);
  l.set_ratio_to_mha(ratio_to_mha);
  l.set_tokens_per_second(tokens_per_second);
  return l;
}

}  // namespace

JobRunner::JobRunner(Store* store, RunnerOptions options)
    : store_(store),
      options_(std::move(options)),
      integrity_(options_.data_dir) {}

JobRunner::~JobRunner() { Stop(); }

std::string JobRunner::ReportPath(const std::string& id) const {
  return (fs::path(options_.data_dir) / "reports" / (id + ".json")).string();
}

std::string JobRunner::ArtifactPath(const std::string& id) const {
  return (fs::path(options_.data_dir) / "artifacts" / id).string();
}

absl::Status JobRunner::Start() {
  std::error_code ec;
  fs::create_directories(fs::path(options_.data_dir) / "reports", ec);
  fs::create_directories(fs::path(options_.data_dir) / "logs", ec);
  fs::create_directories(fs::path(options_.data_dir) / "artifacts", ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat(options_.data_dir, ": ", ec.message()));
  JobFilter queued;
  queued.state = JobState::kQueued;
  std::string token;
  do {
    ASSIGN_OR_RETURN(JobPage page, store_->ListJobs(queued, 1000, token));
    for (const auto& j : page.jobs) {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(j.id);
    }
    token = page.next_page_token;
  } while (!token.empty());
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    threads_.emplace_back([this] { Work(); });
  flusher_ = std::thread([this] { FlushEnds(); });
  return absl::OkStatus();
}

absl::Status JobRunner::Enqueue(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job queue is full (", options_.max_queue, " jobs waiting)"));
  }
  queue_.push_back(id);
  cv_.notify_one();
  return absl::OkStatus();
}

absl::Status JobRunner::Cancel(const std::string& id) {
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(id));
  if (job.state == JobState::kQueued) {
    // An end that survives a full disk (kept in memory until written): the job
    // is cancelled either way.
    if (absl::Status st =
            store_->FinishJob(id, JobState::kCancelled, Now(), "cancelled");
        absl::IsFailedPrecondition(st) || absl::IsNotFound(st)) {
      return st;
    }
  } else if (job.state != JobState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", id, "' already finished (", JobStateName(job.state), ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.insert(id);
  return absl::OkStatus();
}

bool JobRunner::StopRequested(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_ || cancelled_.count(id) > 0;
}

std::function<bool()> JobRunner::StopCheck(const std::string& id) {
  return [this, id] { return StopRequested(id); };
}

void JobRunner::Log(const std::string& job_id, const std::string& line) {
  std::ofstream log(LogPath(job_id), std::ios::app);
  log << Now() << " " << line << "\n";
}

std::string JobRunner::LogPath(const std::string& id) const {
  return (fs::path(options_.data_dir) / "logs" / (id + ".log")).string();
}

void JobRunner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  cv_flush_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  if (flusher_.joinable()) flusher_.join();
  // A clean stop leaves no job `running` behind: ends still in memory are
  // written now (the store gives up its reserve for them if it must).
  if (absl::Status st = store_->FlushPendingEnds(); !st.ok()) {
    std::fprintf(
        stderr,
        "lrkvd: %zu job end(s) could not be stored at shutdown (%s); the "
        "next start re-runs those jobs\n",
        store_->PendingEnds(), std::string(st.message()).c_str());
  }
}

void JobRunner::Work() {
  while (true) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
    }
    auto job = store_->GetJob(id);
    if (!job.ok() || job->state != JobState::kQueued)
      continue;  // cancelled or deleted
    if (!store_->TransitionJob(id, JobState::kRunning, Now()).ok()) continue;
    Log(id, absl::StrCat("start: ", job->kind, " attempt ", job->attempts + 1,
                         " params ", job->params_json));
    JobEvent start;
    start.at = Now();
    start.stage = job->kind;
    start.message = "started";
    (void)store_->AppendEvent(id, start);
    // Each attempt starts clean: what an interrupted one left (a converted
    // folder, result rows) would make this one fail ("output folder exists") or
    // report twice.
    DiscardResults(id);
    const absl::Status executed = Execute(*job);
    // Clients see what failed by the names they use (a checkpoint id, a job's
    // artifact), never lrkvd's folders (the log keeps the message as it was).
    if (!executed.ok())
      Log(id, absl::StrCat("error as raised: ", executed.message()));
    const absl::Status result =
        executed.ok()
            ? executed
            : absl::Status(executed.code(),
                           UserFacingPaths(std::string(executed.message()),
                                           options_.data_dir));
    bool cancelled, shutting_down;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled = cancelled_.erase(id) > 0;
      shutting_down = stopping_;
    }
    // Stopped by a shutdown, not by its user: back to the queue for the next
    // start.
    if (absl::IsCancelled(result) && shutting_down && !cancelled) {
      Log(id, "re-queued: the server is shutting down");
      (void)Stage(id, job->kind, 0, 1,
                  "re-queued: the server is shutting down");
      (void)store_->TransitionJob(id, JobState::kQueued, Now());
      continue;
    }
    Log(id, absl::StrCat("end: ",
                         cancelled     ? "cancelled"
                         : result.ok() ? "succeeded"
                                       : "failed: ",
                         result.ok() ? "" : std::string(result.message())));
    const JobState final_state = cancelled     ? JobState::kCancelled
                                 : result.ok() ? JobState::kSucceeded
                                               : JobState::kFailed;
    // A cancelled or failed job leaves no partial artifacts or result rows (its
    // log and events stay). Removed first: on a full disk that is what makes
    // room for the rows below.
    if (final_state != JobState::kSucceeded) DiscardResults(id);
    JobEvent end;
    end.at = Now();
    end.stage = job->kind;
    end.step = end.total = 1;
    end.message = cancelled     ? "cancelled"
                  : result.ok() ? "done"
                                : std::string(result.message());
    (void)store_->AppendEvent(id, end);
    // Were the disk too full for the row, the end still takes effect: the store
    // keeps it in memory, shown to every reader, and the flusher writes it once
    // space returns.
    if (absl::Status ended =
            store_->FinishJob(id, final_state, Now(),
                              result.ok() ? "" : std::string(result.message()));
        !ended.ok()) {
      Log(id, absl::StrCat(
                  "the final state is kept in memory until it can be stored: ",
                  ended.message()));
    }
  }
}

void JobRunner::FlushEnds() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_flush_.wait_for(lock, std::chrono::seconds(1));
    lock.unlock();
    (void)store_->FlushPendingEnds();
    lock.lock();
  }
}

void JobRunner::DiscardResults(const std::string& id) {
  std::error_code ec;
  fs::remove_all(ArtifactPath(id), ec);
  fs::remove(ReportPath(id), ec);
  if (auto st = store_->ClearResults(id); !st.ok()) {
    Log(id, absl::StrCat("could not clear result rows: ", st.message()));
  }
}

absl::Status JobRunner::Stage(const std::string& job_id,
                              const std::string& stage, int64_t step,
                              int64_t total, const std::string& message) {
  Log(job_id, absl::StrCat(stage, " ", step, "/", total, " ", message));
  JobEvent e;
  e.at = Now();
  e.stage = stage;
  e.step = step;
  e.total = total;
  e.message = message;
  (void)store_->AppendEvent(job_id, e);
  if (StopRequested(job_id)) {
    return absl::CancelledError(absl::StrCat("job stopped before ", stage));
  }
  return absl::OkStatus();
}

absl::Status JobRunner::StoreConversion(const std::string& job_id,
                                        const ConversionReport& r) {
  ConversionRow row;
  row.config = r.target.ToString();
  row.cache_ratio = r.footprint.ratio_to_source;
  row.kv_param_ratio = r.footprint.param_ratio_to_source;
  row.wall_seconds = r.wall_seconds;
  for (const auto& l : r.layers)
    row.layers.push_back({l.layer, l.k.rel_error, l.v.rel_error});
  RETURN_IF_ERROR(store_->AddConversion(job_id, row));
  std::vector<v1::Evaluation> evals;
  if (r.perplexity_before)
    evals.push_back(Evaluation("source", r.eval_tokens, *r.perplexity_before));
  if (r.perplexity_after) {
    evals.push_back(
        Evaluation("converted", r.eval_tokens, *r.perplexity_after));
  }
  return store_->AddRows(job_id, evals);
}

absl::Status JobRunner::StoreEvaluations(const std::string& job_id,
                                         const HealReport& r) {
  std::vector<v1::Evaluation> evals;
  if (r.perplexity_before) {
    evals.push_back(
        Evaluation("before healing", r.eval_tokens, *r.perplexity_before));
  }
  if (r.perplexity_after) {
    evals.push_back(
        Evaluation("after healing", r.eval_tokens, *r.perplexity_after));
  }
  if (r.teacher_perplexity) {
    evals.push_back(
        Evaluation("teacher", r.eval_tokens, *r.teacher_perplexity));
  }
  return store_->AddRows(job_id, evals);
}

absl::StatusOr<nlohmann::json> JobRunner::RunBench(
    const JobRecord& job, const CheckpointRecord& source) {
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(source.path));
  ASSIGN_OR_RETURN(kernels::DecodeBenchOptions o,
                   ParseBenchParams(job.params_json, ckpt->config()));
  RETURN_IF_ERROR(Stage(job.id, "bench", 1, 1, "timing decode kernels"));
  ASSIGN_OR_RETURN(kernels::DecodeBenchReport r, kernels::RunDecodeBench(o));
  std::vector<v1::LatencyRow> rows;
  for (const auto& b : r.rows) {
    // The streaming-read reference is in the report, not a decode latency.
    if (b.variant == "stream") continue;
    rows.push_back(Latency(b.config, b.variant, b.context, b.median_ms, b.gbps,
                           b.ratio_to_mha, 1e3 * o.batch / b.median_ms));
  }
  RETURN_IF_ERROR(store_->AddRows(job.id, rows));
  return nlohmann::json::parse(r.ToJson());
}

absl::StatusOr<nlohmann::json> JobRunner::RunCompare(
    const JobRecord& job, const CheckpointRecord& source) {
  ASSIGN_OR_RETURN(
      CompareJobOptions o,
      ParseCompareParams(job.params_json, source.path, ArtifactPath(job.id)));
  o.should_stop = StopCheck(job.id);
  ASSIGN_OR_RETURN(CompareReport r,
                   RunCompareJob(o, [&](const std::string& stage, int64_t i,
                                        int64_t n, const std::string& message) {
                     (void)Stage(job.id, stage, i, n, message);
                   }));
  for (const CompareRow& row : r.rows) {
    RETURN_IF_ERROR(store_->AddComparison(job.id, row));
  }
  std::vector<v1::LatencyRow> latency;
  for (const auto& l : r.latency) {
    latency.push_back(Latency(l.config, l.rope_mode, l.context, l.step_ms, 0,
                              l.ratio_to_mha, 1e3 / l.step_ms));
  }
  RETURN_IF_ERROR(store_->AddRows(job.id, latency));
  // The study at equal bytes: each point a held-out evaluation through its
  // cache (bytes and the Pareto front are in the job's report).
  std::vector<v1::Evaluation> evaluations = {
      Evaluation("source", r.eval_tokens, r.source_perplexity)};
  for (const CachePoint& p : r.cache_points) {
    evaluations.push_back(
        Evaluation(absl::StrCat(p.label, " [", p.cache, " cache]"),
                   r.eval_tokens, p.perplexity));
  }
  RETURN_IF_ERROR(store_->AddRows(job.id, evaluations));
  return r.ToJson();
}

absl::Status JobRunner::StoreVerification(const std::string& job_id,
                                          const VerifyReport& r) {
  std::vector<v1::Check> rows;
  for (const auto& e : r.equivalence) {
    v1::Check& row = rows.emplace_back();
    row.set_name(e.mode + " " + e.dtype);
    row.set_passed(e.applicable && e.passed());
    row.set_max_rel(e.worst_layer.max_rel);
    row.set_cos_dist(e.worst_layer.cos_dist);
    row.set_detail(e.applicable ? DescribeEquivalence(e) : e.reason);
    row.set_verdict(!e.applicable && e.required ? "n/a (required)"
                                                : EquivalenceVerdict(e));
    row.set_error(e.candidate_error);
    row.set_bound(e.bound);
    row.set_ratio(e.ratio);
  }
  std::vector<v1::CacheRow> cache;
  for (const auto& c : r.cache) {
    v1::Check& row = rows.emplace_back();
    row.set_name(absl::StrCat("cache ", c.engine, " ", c.tokens, " tokens"));
    row.set_passed(c.passed());
    row.set_detail(
        absl::StrCat(c.used_bytes, " bytes used, formula ", c.formula_bytes));
    row.set_verdict(c.passed() ? "pass" : "FAIL");
    v1::CacheRow& measured = cache.emplace_back();
    measured.set_engine(c.engine);
    measured.set_variant(c.variant);
    measured.set_tokens(c.tokens);
    measured.set_used_bytes(c.used_bytes);
    measured.set_formula_bytes(c.formula_bytes);
  }
  RETURN_IF_ERROR(store_->AddRows(job_id, rows));
  return store_->AddRows(job_id, cache);
}

absl::StatusOr<HealReport> JobRunner::Heal(const std::string& job_id,
                                           const HealJobOptions& options) {
  std::vector<v1::LossPoint> curve;
  HealJobOptions stoppable = options;
  stoppable.heal.should_stop = StopCheck(job_id);
  ASSIGN_OR_RETURN(
      HealReport report, RunHealJob(stoppable, [&](const HealEvent& e) {
        const double loss = e.kind == "step" ? e.loss : e.eval_loss;
        JobEvent ev;
        ev.at = Now();
        ev.stage = "heal";
        ev.step = e.step;
        ev.total = options.heal.steps;
        ev.loss = loss;
        ev.message = e.kind;
        (void)store_->AppendEvent(job_id, ev);
        v1::LossPoint& point = curve.emplace_back();
        point.set_step(e.step);
        point.set_kind(e.kind);
        point.set_loss(loss);
        point.set_lr(e.lr);
      }));
  RETURN_IF_ERROR(store_->AddRows(job_id, curve));
  return report;
}

absl::StatusOr<nlohmann::json> JobRunner::RunPipeline(
    const JobRecord& job, const CheckpointRecord& source) {
  ASSIGN_OR_RETURN(PipelineParams pp, ParsePipelineParams(job.params_json));
  nlohmann::json report;
  const std::string base = ArtifactPath(job.id);
  std::error_code ec;
  fs::create_directories(base, ec);
  const int64_t stages = pp.heal_json.empty() ? 3 : 4;
  int64_t stage = 0;
  // 1. Convert.
  RETURN_IF_ERROR(Stage(job.id, "convert", ++stage, stages, "converting"));
  ASSIGN_OR_RETURN(
      ConvertJobOptions co,
      ParseConvertParams(pp.convert_json, source.path, base + "/converted"));
  co.should_stop = StopCheck(job.id);
  ASSIGN_OR_RETURN(ConversionReport cr, RunConvertJob(co));
  RETURN_IF_ERROR(StoreConversion(job.id, cr));
  report["convert"] = cr.ToJson();
  std::string model = base + "/converted";
  // 2. Heal, distilling from the source.
  if (!pp.heal_json.empty()) {
    RETURN_IF_ERROR(Stage(job.id, "heal", ++stage, stages, "healing"));
    ASSIGN_OR_RETURN(HealJobOptions ho,
                     ParseHealParams(pp.heal_json, model, base + "/healed"));
    ho.teacher = source.path;
    ASSIGN_OR_RETURN(HealReport hr, Heal(job.id, ho));
    RETURN_IF_ERROR(StoreEvaluations(job.id, hr));
    report["heal"] = hr.ToJson();
    model = base + "/healed";
  }
  // 3. Verify the final model against itself (equivalence) and the source
  // (fidelity).
  RETURN_IF_ERROR(Stage(job.id, "verify", ++stage, stages, "verifying"));
  ASSIGN_OR_RETURN(VerifyJobOptions vo,
                   ParseVerifyParams(pp.verify_json, model));
  if (vo.source.empty()) vo.source = source.path;
  vo.should_stop = StopCheck(job.id);
  ASSIGN_OR_RETURN(VerifyReport vr, RunVerifyJob(vo));
  RETURN_IF_ERROR(StoreVerification(job.id, vr));
  report["verify"] = vr.ToJson();
  // 4. Decode throughput of the final model beside the source.
  RETURN_IF_ERROR(Stage(job.id, "bench", ++stage, stages, "benchmarking"));
  GenerateBenchOptions bo = pp.bench;
  bo.checkpoint = model;
  // The decode mode of the converted model: its RoPE mode's name.
  const std::string mode =
      RopeModeName(WithAutoResolved(co).conversion.rope_mode);
  if (bo.mode == "auto") bo.mode = mode;
  bo.source = source.path;
  ASSIGN_OR_RETURN(auto rows, RunGenerateBench(bo));
  nlohmann::json bench = nlohmann::json::array();
  double source_ms = 0;
  for (const auto& r : rows) {
    if (r.model == "source") source_ms = 1e3 / r.tokens_per_second;
  }
  std::vector<v1::LatencyRow> latency;
  for (const auto& r : rows) {
    const double ms = 1e3 / r.tokens_per_second;
    latency.push_back(Latency(r.model, r.engine, r.context, ms, 0,
                              source_ms > 0 ? ms / source_ms : 0,
                              r.tokens_per_second));
  }
  RETURN_IF_ERROR(store_->AddRows(job.id, latency));
  for (const auto& r : rows) {
    bench.push_back({{"model", r.model},
                     {"engine", r.engine},
                     {"context", r.context},
                     {"tokens", r.tokens},
                     {"tokens_per_second", r.tokens_per_second},
                     {"cache_bytes", r.cache_bytes}});
  }
  report["bench"] = bench;
  report["passed"] = vr.passed();
  return report;
}

absl::Status JobRunner::Execute(const JobRecord& job) {
  ASSIGN_OR_RETURN(CheckpointRecord ckpt,
                   store_->GetCheckpoint(job.checkpoint_id));
  // What the job reads is what was registered (store_integrity.h).
  RETURN_IF_ERROR(integrity_.CheckCheckpoint(ckpt.id, ckpt.path));
  RETURN_IF_ERROR(integrity_.CheckParams(job.params_json));
  const auto started = std::chrono::steady_clock::now();
  const int64_t started_at = Now();
  nlohmann::json report;
  if (job.kind == "convert") {
    ASSIGN_OR_RETURN(
        ConvertJobOptions o,
        ParseConvertParams(job.params_json, ckpt.path, ArtifactPath(job.id)));
    o.should_stop = StopCheck(job.id);
    o.on_progress = [&](const std::string& what, int64_t i, int64_t n) {
      (void)Stage(job.id, "convert", i, n, what);
    };
    ASSIGN_OR_RETURN(ConversionReport r, RunConvertJob(o));
    RETURN_IF_ERROR(StoreConversion(job.id, r));
    report = r.ToJson();
  } else if (job.kind == "verify") {
    ASSIGN_OR_RETURN(VerifyJobOptions o,
                     ParseVerifyParams(job.params_json, ckpt.path));
    o.should_stop = StopCheck(job.id);
    o.on_progress = [&](const std::string& what, int64_t i, int64_t n) {
      (void)Stage(job.id, "verify", i, n, what);
    };
    ASSIGN_OR_RETURN(VerifyReport r, RunVerifyJob(o));
    RETURN_IF_ERROR(StoreVerification(job.id, r));
    report = r.ToJson();
  } else if (job.kind == "pipeline") {
    ASSIGN_OR_RETURN(report, RunPipeline(job, ckpt));
  } else if (job.kind == "heal") {
    ASSIGN_OR_RETURN(
        HealJobOptions o,
        ParseHealParams(job.params_json, ckpt.path, ArtifactPath(job.id)));
    // The parsed "teacher" is a checkpoint id until it is resolved here.
    if (!o.teacher.empty()) {
      ASSIGN_OR_RETURN(CheckpointRecord teacher,
                       store_->GetCheckpoint(o.teacher));
      RETURN_IF_ERROR(integrity_.CheckCheckpoint(teacher.id, teacher.path));
      o.teacher = teacher.path;
    }
    ASSIGN_OR_RETURN(HealReport r, Heal(job.id, o));
    RETURN_IF_ERROR(StoreEvaluations(job.id, r));
    report = r.ToJson();
  } else if (job.kind == "bench") {
    ASSIGN_OR_RETURN(report, RunBench(job, ckpt));
  } else if (job.kind == "compare") {
    ASSIGN_OR_RETURN(report, RunCompare(job, ckpt));
  } else {
    return absl::UnimplementedError(
        absl::StrCat("job kind '", job.kind,
                     "' is not served yet (convert, verify, heal, "
                     "bench, pipeline)"));
  }
  // Where the report came from: this lrkvd's build and host, the job as
  // submitted, the checkpoint by content (its id is its sha256), the times.
  nlohmann::json provenance = Provenance();
  provenance["job"] = {
      {"id", job.id},
      {"kind", job.kind},
      {"params", nlohmann::json::parse(job.params_json, nullptr, false)},
      {"checkpoint_sha256", ckpt.id},
      {"checkpoint_format", ckpt.format},
      {"attempt", job.attempts + 1},
      {"created_at", job.created_at},  // unix seconds
      {"started_at", started_at},
      {"seconds",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
           .count()}};
  if (report.is_object()) report["provenance"] = provenance;
  if (job.kind == "compare" && report.is_object() &&
      report.contains("run_config")) {
    report["run_config"]["provenance"] = provenance;  // shown on the HTML page
  }
  return WriteFileAtomically(
      ReportPath(job.id),
      UserFacingPaths(report, options_.data_dir).dump(2) + "\n");
}

}  // namespace lrkv::service
