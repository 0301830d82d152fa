// The service's SQLite store (see store.h).
#include "service/store.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "service/proto_rows.h"

namespace lrkv::service {

std::string Shown(const std::string& id) {
  return id.size() <= 64 ? id : absl::StrCat(id.substr(0, 64), "... (", id.size(), " bytes)");
}

namespace {

constexpr const char* kStateNames[] = {"queued", "running", "succeeded",
                                       "failed", "cancelled"};

// Migration N takes the schema from version N-1 to N.
// 1: checkpoints, jobs, events, verification checks, loss curves. 3: verdicts.
constexpr const char* kMigrations[] = {
    R"sql(
    CREATE TABLE checkpoints (
      id TEXT PRIMARY KEY, format TEXT NOT NULL, architecture TEXT NOT NULL,
      path TEXT NOT NULL, bytes INTEGER NOT NULL, created_at INTEGER NOT NULL);
    CREATE TABLE jobs (
      id TEXT PRIMARY KEY, kind TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
      params_json TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
      created_at INTEGER NOT NULL, started_at INTEGER NOT NULL DEFAULT 0,
      finished_at INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '');
    CREATE INDEX jobs_by_created ON jobs (created_at, id);
    CREATE TABLE job_events (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
      at INTEGER NOT NULL, stage TEXT NOT NULL, step INTEGER NOT NULL,
      total INTEGER NOT NULL, loss REAL, message TEXT NOT NULL, PRIMARY KEY (job_id, seq));
    CREATE TABLE verification_checks (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, check_name TEXT NOT NULL,
      passed INTEGER NOT NULL, max_rel REAL NOT NULL, cos_dist REAL NOT NULL,
      detail TEXT NOT NULL, PRIMARY KEY (job_id, check_name));
    CREATE TABLE loss_curve (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
      kind TEXT NOT NULL, loss REAL NOT NULL, lr REAL NOT NULL,
      PRIMARY KEY (job_id, kind, step));
    )sql",
    // 2: the measurement tables (conversion, cache, latency, evaluations,
    // comparisons).
    R"sql(
    CREATE TABLE conversions (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, config TEXT NOT NULL,
      cache_ratio REAL NOT NULL, kv_param_ratio REAL NOT NULL, wall_seconds REAL NOT NULL,
      PRIMARY KEY (job_id, config));
    CREATE TABLE conversion_layers (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, config TEXT NOT NULL,
      layer INTEGER NOT NULL, k_rel REAL NOT NULL, v_rel REAL NOT NULL,
      PRIMARY KEY (job_id, config, layer));
    CREATE TABLE cache_measurements (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, engine TEXT NOT NULL,
      variant TEXT NOT NULL, tokens INTEGER NOT NULL, used_bytes INTEGER NOT NULL,
      formula_bytes INTEGER NOT NULL, PRIMARY KEY (job_id, engine, variant, tokens));
    CREATE TABLE latency_measurements (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, variant TEXT NOT NULL,
      engine TEXT NOT NULL, context INTEGER NOT NULL, median_ms REAL NOT NULL,
      gbps REAL NOT NULL, ratio_to_mha REAL NOT NULL, tokens_per_second REAL NOT NULL,
      PRIMARY KEY (job_id, variant, engine, context));
    CREATE TABLE evaluations (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, label TEXT NOT NULL,
      tokens INTEGER NOT NULL, perplexity REAL NOT NULL, PRIMARY KEY (job_id, label));
    CREATE TABLE comparison_rows (
      job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, model TEXT NOT NULL,
      budget REAL NOT NULL, variant TEXT NOT NULL, rope_mode TEXT NOT NULL,
      config TEXT NOT NULL, cache_ratio REAL NOT NULL, kv_params INTEGER NOT NULL,
      ppl_before REAL NOT NULL, ppl_after REAL, kl_mean REAL, verdict TEXT NOT NULL,
      step_ms REAL NOT NULL, step_ratio_to_mha REAL NOT NULL, madds_per_step INTEGER NOT NULL,
      PRIMARY KEY (job_id, model, budget, variant, rope_mode));
    )sql",
    // 3: the verdict word and the error model's numbers of each check.
    R"sql(
    ALTER TABLE verification_checks ADD COLUMN verdict TEXT NOT NULL DEFAULT '';
    ALTER TABLE verification_checks ADD COLUMN error REAL NOT NULL DEFAULT 0;
    ALTER TABLE verification_checks ADD COLUMN bound REAL NOT NULL DEFAULT 0;
    ALTER TABLE verification_checks ADD COLUMN ratio REAL NOT NULL DEFAULT 0;
    )sql",
    // 4: the whole study row (study/compare_row.h): the kept healing step, the
    // verdict's error and bound, and the context the step was timed at.
    R"sql(
    ALTER TABLE comparison_rows ADD COLUMN heal_kept_step INTEGER;
    ALTER TABLE comparison_rows ADD COLUMN verify_error REAL NOT NULL DEFAULT 0;
    ALTER TABLE comparison_rows ADD COLUMN verify_bound REAL NOT NULL DEFAULT 0;
    ALTER TABLE comparison_rows ADD COLUMN step_context INTEGER NOT NULL DEFAULT 0;
    )sql",
    // 5: the result tables' columns named as their proto message's fields
    // (proto_rows.h): a check's name.
    R"sql(
    ALTER TABLE verification_checks RENAME COLUMN check_name TO name;
    )sql",
};

constexpr char kSelectJob[] =
    "SELECT id, kind, checkpoint_id, params_json, state, attempts, created_at, "
    "started_at, "
    "finished_at, error FROM jobs";

JobRecord ReadJob(const Statement& s) {
  JobRecord j;
  j.id = s.Text(0);
  j.kind = s.Text(1);
  j.checkpoint_id = s.Text(2);
  j.params_json = s.Text(3);
  j.state = *ParseJobState(s.Text(4));
  j.attempts = s.Int64(5);
  j.created_at = s.Int64(6);
  j.started_at = s.Int64(7);
  j.finished_at = s.Int64(8);
  j.error = s.Text(9);
  return j;
}

bool Allowed(JobState from, JobState to) {
  switch (from) {
    case JobState::kQueued:
      return to == JobState::kRunning || to == JobState::kCancelled;
    case JobState::kRunning:
      return to == JobState::kSucceeded || to == JobState::kFailed ||
             to == JobState::kCancelled || to == JobState::kQueued;
    default:
      return false;  // finished jobs stay finished
  }
}

}  // namespace

const char* JobStateName(JobState s) {
  const int i = static_cast<int>(s);
  return i >= 0 && i < 5 ? kStateNames[i] : "unknown";
}

absl::StatusOr<JobState> ParseJobState(const std::string& name) {
  for (int i = 0; i < 5; ++i) {
    if (name == kStateNames[i]) return static_cast<JobState>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job state '", name,
                   "'; valid: queued, running, succeeded, failed, cancelled"));
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   int64_t reserve_bytes) {
  ASSIGN_OR_RETURN(auto db, Database::Open(path));
  std::unique_ptr<Store> store(new Store(std::move(db)));
  RETURN_IF_ERROR(store->Migrate());
  if (reserve_bytes > 0) {
    store->reserve_path_ = path + ".reserve";
    store->reserve_bytes_ = reserve_bytes;
    store->EnsureReserve();
  }
  return store;
}

absl::Status Store::Migrate() {
  RETURN_IF_ERROR(db_->Execute(
      "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);"));
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  {
    ASSIGN_OR_RETURN(
        auto q,
        Statement::Prepare(*db_, "SELECT MAX(version) FROM schema_version"));
    ASSIGN_OR_RETURN(bool row, q.Step());
    version_ = row && !q.IsNull(0) ? static_cast<int>(q.Int64(0)) : 0;
  }
  if (version_ > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("database schema version ", version_,
                     " is newer than this lrkvd (", kSchemaVersion, ")"));
  }
  for (int v = version_; v < kSchemaVersion; ++v) {
    RETURN_IF_ERROR(db_->Execute(kMigrations[v]));
    ASSIGN_OR_RETURN(
        auto ins, Statement::Prepare(
                      *db_, "INSERT INTO schema_version (version) VALUES (?)"));
    RETURN_IF_ERROR(ins.Bind(1, int64_t{v + 1}).Run());
  }
  RETURN_IF_ERROR(tx->Commit());
  version_ = kSchemaVersion;
  return absl::OkStatus();
}

absl::Status Store::PutCheckpoint(const CheckpointRecord& c) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  constexpr char kSql[] =
      "INSERT OR REPLACE INTO checkpoints (id, format, architecture, path, "
      "bytes, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?)";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  return s.Bind(1, c.id)
      .Bind(2, c.format)
      .Bind(3, c.architecture)
      .Bind(4, c.path)
      .Bind(5, c.bytes)
      .Bind(6, c.created_at)
      .Run();
}

absl::StatusOr<CheckpointRecord> Store::GetCheckpoint(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  constexpr char kSql[] =
      "SELECT id, format, architecture, path, bytes, created_at FROM "
      "checkpoints WHERE id = ?";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  s.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row)
    return absl::NotFoundError(
        absl::StrCat("no checkpoint with id '", Shown(id), "'"));
  return CheckpointRecord{s.Text(0), s.Text(1),  s.Text(2),
                          s.Text(3), s.Int64(4), s.Int64(5)};
}

absl::Status Store::CreateJob(const JobRecord& j) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  constexpr char kSql[] =
      "INSERT INTO jobs (id, kind, checkpoint_id, params_json, state, "
      "attempts, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?)";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  s.Bind(1, j.id)
      .Bind(2, j.kind)
      .Bind(3, j.checkpoint_id)
      .Bind(4, j.params_json)
      .Bind(5, std::string(JobStateName(j.state)))
      .Bind(6, j.attempts)
      .Bind(7, j.created_at);
  auto st = s.Run();
  if (!st.ok() &&
      sqlite3_extended_errcode(db_->handle()) == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return absl::AlreadyExistsError(
        absl::StrCat("job '", j.id, "' already exists"));
  }
  return st;
}

absl::StatusOr<JobRecord> Store::GetJob(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      auto s, Statement::Prepare(
                  *db_, absl::StrCat(kSelectJob, " WHERE id = ?").c_str()));
  s.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row)
    return absl::NotFoundError(absl::StrCat("no job with id '", Shown(id), "'"));
  JobRecord job = ReadJob(s);
  ApplyPendingEnd(&job);
  return job;
}

absl::StatusOr<JobPage> Store::ListJobs(const JobFilter& f, int64_t page_size,
                                        const std::string& page_token) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (page_size < 1 || page_size > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", page_size, " must lie in [1, 1000]"));
  }
  // The token carries the last row's sort key itself ("created_at:id"), so paging
  // goes on when that job is deleted meanwhile.
  int64_t after_created = -1;
  std::string after_id;
  if (!page_token.empty()) {
    const size_t colon = page_token.find(':');
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(page_token.substr(0, colon), &after_created) || after_created < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("page_token '", page_token.substr(0, 64),
                       "' is not a next_page_token from a previous page"));
    }
    after_id = page_token.substr(colon + 1);
  }
  // Fixed SQL: unused filters compare against themselves.
  const std::string sql = absl::StrCat(
      kSelectJob,
      " WHERE (? = '' OR state = ?) AND (? = '' OR kind = ?) AND (? = '' OR "
      "checkpoint_id = ?)"
      " AND (? < 0 OR created_at > ? OR (created_at = ? AND id > ?))"
      " ORDER BY created_at, id LIMIT ?");
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, sql.c_str()));
  const std::string state = f.state ? JobStateName(*f.state) : "";
  s.Bind(1, state)
      .Bind(2, state)
      .Bind(3, f.kind)
      .Bind(4, f.kind)
      .Bind(5, f.checkpoint_id)
      .Bind(6, f.checkpoint_id)
      .Bind(7, after_created)
      .Bind(8, after_created)
      .Bind(9, after_created)
      .Bind(10, after_id)
      .Bind(11, page_size + 1);
  JobPage page;
  ASSIGN_OR_RETURN(page.jobs, ReadRows<JobRecord>(s, ReadJob));
  // Ends kept in memory show over their rows; a row whose shown state no longer
  // matches the filter drops out (a job ended in memory while its row still says
  // running is listed under its end only once written).
  for (JobRecord& j : page.jobs) ApplyPendingEnd(&j);
  if (static_cast<int64_t>(page.jobs.size()) > page_size) {
    page.jobs.pop_back();
    page.next_page_token = absl::StrCat(page.jobs.back().created_at, ":", page.jobs.back().id);
  }
  if (f.state) {
    page.jobs.erase(std::remove_if(page.jobs.begin(), page.jobs.end(),
                                   [&](const JobRecord& j) { return j.state != *f.state; }),
                    page.jobs.end());
  }
  return page;
}

absl::Status Store::TransitionJob(const std::string& id, JobState to,
                                  int64_t now, const std::string& error) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  ASSIGN_OR_RETURN(JobRecord job, GetJob(id));
  if (!Allowed(job.state, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", id, "' is ", JobStateName(job.state),
                     "; cannot become ", JobStateName(to)));
  }
  constexpr char kSql[] =
      "UPDATE jobs SET state = ?, attempts = attempts + ?, started_at = CASE "
      "WHEN ? THEN ? "
      "ELSE started_at END, finished_at = CASE WHEN ? THEN ? ELSE finished_at "
      "END, error = ? "
      "WHERE id = ?";
  const bool start = to == JobState::kRunning;
  const bool finish = to == JobState::kSucceeded || to == JobState::kFailed ||
                      to == JobState::kCancelled;
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  RETURN_IF_ERROR(s.Bind(1, std::string(JobStateName(to)))
                      .Bind(2, int64_t{start ? 1 : 0})
                      .Bind(3, int64_t{start})
                      .Bind(4, now)
                      .Bind(5, int64_t{finish})
                      .Bind(6, now)
                      .Bind(7, error)
                      .Bind(8, id)
                      .Run());
  return tx->Commit();
}

absl::Status Store::DeleteJob(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  RETURN_IF_ERROR(GetJob(id).status());
  ASSIGN_OR_RETURN(auto s,
                   Statement::Prepare(*db_, "DELETE FROM jobs WHERE id = ?"));
  RETURN_IF_ERROR(s.Bind(1, id).Run());
  pending_ends_.erase(id);
  return absl::OkStatus();
}

namespace {

// The tables holding a job's results (not its record or events), with the statements
// that clear and count one job's rows.
struct ResultTable {
  const char* name;
  const char* clear;
  const char* count;
};
constexpr ResultTable kResultTables[] = {
    {"verification_checks", "DELETE FROM verification_checks WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM verification_checks WHERE job_id = ?"},
    {"loss_curve", "DELETE FROM loss_curve WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM loss_curve WHERE job_id = ?"},
    {"conversion_layers", "DELETE FROM conversion_layers WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM conversion_layers WHERE job_id = ?"},
    {"conversions", "DELETE FROM conversions WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM conversions WHERE job_id = ?"},
    {"cache_measurements", "DELETE FROM cache_measurements WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM cache_measurements WHERE job_id = ?"},
    {"latency_measurements", "DELETE FROM latency_measurements WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM latency_measurements WHERE job_id = ?"},
    {"evaluations", "DELETE FROM evaluations WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM evaluations WHERE job_id = ?"},
    {"comparison_rows", "DELETE FROM comparison_rows WHERE job_id = ?",
     "SELECT COUNT(*) AS n FROM comparison_rows WHERE job_id = ?"},
};

}  // namespace

absl::Status Store::ClearResults(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  for (const ResultTable& t : kResultTables) {
    ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, t.clear));
    RETURN_IF_ERROR(s.Bind(1, id).Run());
  }
  return tx->Commit();
}

absl::StatusOr<int64_t> Store::CountRows(const std::string& table, const std::string& id) {
  for (const ResultTable& t : kResultTables) {
    if (table != t.name) continue;
    std::lock_guard<std::recursive_mutex> lock(mu_);
    ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, t.count));
    ASSIGN_OR_RETURN(bool row, s.Bind(1, id).Step());
    return row ? s.Int64(0) : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("no result table ", table));
}

absl::StatusOr<int64_t> Store::RecoverRunningJobs(int64_t max_attempts,
                                                  int64_t now) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  constexpr char kFail[] =
      "UPDATE jobs SET state = 'failed', finished_at = ?, error = 'gave up "
      "after ' || attempts "
      "|| ' attempts (the server stopped while it ran)' WHERE state = "
      "'running' AND attempts >= ?";
  constexpr char kRequeue[] =
      "UPDATE jobs SET state = 'queued' WHERE state = 'running'";
  ASSIGN_OR_RETURN(auto fail, Statement::Prepare(*db_, kFail));
  RETURN_IF_ERROR(fail.Bind(1, now).Bind(2, max_attempts).Run());
  int64_t touched = sqlite3_changes(db_->handle());
  ASSIGN_OR_RETURN(auto requeue, Statement::Prepare(*db_, kRequeue));
  RETURN_IF_ERROR(requeue.Run());
  touched += sqlite3_changes(db_->handle());
  RETURN_IF_ERROR(tx->Commit());
  return touched;
}

absl::StatusOr<int64_t> Store::AppendEvent(const std::string& job_id,
                                           const JobEvent& e) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  ASSIGN_OR_RETURN(
      auto q,
      Statement::Prepare(
          *db_,
          "SELECT COALESCE(MAX(seq), 0) + 1 FROM job_events WHERE job_id = ?"));
  q.Bind(1, job_id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  const int64_t seq = row ? q.Int64(0) : 1;
  constexpr char kSql[] =
      "INSERT INTO job_events (job_id, seq, at, stage, step, total, loss, "
      "message) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  RETURN_IF_ERROR(s.Bind(1, job_id)
                      .Bind(2, seq)
                      .Bind(3, e.at)
                      .Bind(4, e.stage)
                      .Bind(5, e.step)
                      .Bind(6, e.total)
                      .Bind(7, e.loss)
                      .Bind(8, e.message)
                      .Run());
  RETURN_IF_ERROR(tx->Commit());
  return seq;
}

namespace {

constexpr char kSelectEvent[] =
    "SELECT seq, at, stage, step, total, loss, message FROM job_events ";

JobEvent ReadEvent(const Statement& s) {
  JobEvent e;
  e.seq = s.Int64(0);
  e.at = s.Int64(1);
  e.stage = s.Text(2);
  e.step = s.Int64(3);
  e.total = s.Int64(4);
  if (!s.IsNull(5)) e.loss = s.Double(5);
  e.message = s.Text(6);
  return e;
}

}  // namespace

absl::StatusOr<std::vector<JobEvent>> Store::Events(const std::string& job_id,
                                                    int64_t after) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const std::string sql =
      absl::StrCat(kSelectEvent, "WHERE job_id = ? AND seq > ? ORDER BY seq");
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, sql.c_str()));
  s.Bind(1, job_id).Bind(2, after);
  return ReadRows<JobEvent>(s, ReadEvent);
}

absl::StatusOr<std::optional<JobEvent>> Store::LastEvent(
    const std::string& job_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const std::string sql =
      absl::StrCat(kSelectEvent, "WHERE job_id = ? ORDER BY seq DESC LIMIT 1");
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, sql.c_str()));
  s.Bind(1, job_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return ReadEvent(s);
}

namespace {

// Each result table: its rows' message and the order of a job's rows.
template <typename M>
ProtoTable TableOf();
template <>
ProtoTable TableOf<v1::Check>() {
  return {"verification_checks", "name"};
}
template <>
ProtoTable TableOf<v1::LossPoint>() {
  return {"loss_curve", "kind, step"};
}
template <>
ProtoTable TableOf<v1::CacheRow>() {
  return {"cache_measurements", "engine, variant, tokens"};
}
template <>
ProtoTable TableOf<v1::LatencyRow>() {
  return {"latency_measurements", "context, variant, engine"};
}
template <>
ProtoTable TableOf<v1::Evaluation>() {
  return {"evaluations", "label"};
}

}  // namespace

template <typename M>
absl::Status Store::AddRows(const std::string& job_id,
                            const std::vector<M>& rows) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return InsertRows(*db_, TableOf<M>(), job_id, rows);
}

template <typename M>
absl::StatusOr<std::vector<M>> Store::Rows(const std::string& job_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return SelectRows<M>(*db_, TableOf<M>(), job_id);
}

#define LRKV_STORE_ROWS(M)                                        \
  template absl::Status Store::AddRows<M>(const std::string&,     \
                                          const std::vector<M>&); \
  template absl::StatusOr<std::vector<M>> Store::Rows<M>(const std::string&);
LRKV_STORE_ROWS(v1::Check)
LRKV_STORE_ROWS(v1::LossPoint)
LRKV_STORE_ROWS(v1::CacheRow)
LRKV_STORE_ROWS(v1::LatencyRow)
LRKV_STORE_ROWS(v1::Evaluation)
#undef LRKV_STORE_ROWS

absl::StatusOr<std::string> Store::IntegrityCheck() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, "PRAGMA integrity_check"));
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Text(0) : std::string("no result");
}

}  // namespace lrkv::service
