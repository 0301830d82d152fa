// A small RAII layer over SQLite (see sqlite_db.h).
#include "service/sqlite_db.h"

#include "absl/strings/str_cat.h"

namespace lrkv::service {

absl::StatusOr<std::unique_ptr<Database>> Database::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open database: ", msg));
  }
  std::unique_ptr<Database> out(new Database(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma :
       {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;",
        "PRAGMA foreign_keys=ON;"}) {
    if (auto st = out->Execute(pragma); !st.ok()) return st;
  }
  return out;
}

Database::~Database() { sqlite3_close(db_); }

absl::Status Database::Error(const std::string& what) const {
  const std::string msg = absl::StrCat(what, ": ", sqlite3_errmsg(db_));
  // A full disk (or a database at its size limit) is the server's resources running
  // out, which a client may retry later: not an internal error.
  const int code = sqlite3_extended_errcode(db_) & 0xff;
  if (code == SQLITE_FULL) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the database could not be written (", msg,
        "): free space on the data folder's file system and retry"));
  }
  return absl::InternalError(msg);
}

absl::Status Database::Execute(const char* sql) {
  char* err = nullptr;
  if (const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    const std::string msg = absl::StrCat("sqlite: ", err ? err : "error", " in: ", sql);
    sqlite3_free(err);
    // A COMMIT that finds the disk full is the same resource running out as a
    // statement's (Error above), not an internal fault.
    if ((rc & 0xff) == SQLITE_FULL) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the database could not be written (", msg,
          "): free space on the data folder's file system and retry"));
    }
    return absl::InternalError(msg);
  }
  return absl::OkStatus();
}

absl::StatusOr<Statement> Statement::Prepare(Database& db, const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db.handle(), sql, -1, &stmt, nullptr) != SQLITE_OK) {
    return db.Error(absl::StrCat("prepare '", sql, "'"));
  }
  return Statement(&db, stmt);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Statement& Statement::Bind(int i, double v) {
  sqlite3_bind_double(stmt_, i, v);
  return *this;
}
Statement& Statement::Bind(int i, const std::string& v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()),
                    SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}
Statement& Statement::Bind(int i, const std::optional<double>& v) {
  return v ? Bind(i, *v) : BindNull(i);
}

Statement& Statement::Bind(int i, const std::optional<int64_t>& v) {
  return v ? Bind(i, *v) : BindNull(i);
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error("step");
}

absl::Status Statement::Run() {
  auto r = Step();
  // Ready to be bound and run again (one prepared statement serves a whole
  // batch).
  sqlite3_reset(stmt_);
  if (!r.ok()) return r.status();
  return absl::OkStatus();
}

int64_t Statement::Int64(int c) const { return sqlite3_column_int64(stmt_, c); }
double Statement::Double(int c) const {
  return sqlite3_column_double(stmt_, c);
}
std::string Statement::Text(int c) const {
  const auto* p = sqlite3_column_text(stmt_, c);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         sqlite3_column_bytes(stmt_, c))
           : "";
}
bool Statement::IsNull(int c) const {
  return sqlite3_column_type(stmt_, c) == SQLITE_NULL;
}

absl::StatusOr<std::unique_ptr<Transaction>> Transaction::Begin(Database& db) {
  if (auto st = db.Execute("BEGIN IMMEDIATE;"); !st.ok()) return st;
  return std::unique_ptr<Transaction>(new Transaction(db));
}

Transaction::~Transaction() {
  if (!done_) (void)db_.Execute("ROLLBACK;");
}

absl::Status Transaction::Commit() {
  auto st = db_.Execute("COMMIT;");
  if (st.ok()) done_ = true;
  return st;
}

}  // namespace lrkv::service
