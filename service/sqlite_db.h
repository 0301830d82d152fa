// A small RAII layer over SQLite in the style of Chromium's sql/: a Database
// with the pragmas the store needs (WAL, synchronous=FULL, busy timeout,
// foreign keys), prepared Statements with `?` binds, and IMMEDIATE Transactions
// that roll back unless committed. Errors come back as absl::Status.
#ifndef LRKV_SERVICE_SQLITE_DB_H_
#define LRKV_SERVICE_SQLITE_DB_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"

namespace lrkv::service {

class Database {
 public:
  // Opens (creating) the database file and applies the pragmas.
  static absl::StatusOr<std::unique_ptr<Database>> Open(
      const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs SQL without results (may hold several statements).
  absl::Status Execute(const char* sql);
  sqlite3* handle() const { return db_; }
  // The last error, with context.
  absl::Status Error(const std::string& what) const;

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(Database& db, const char* sql);
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Binds are 1-based, as in SQLite.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, double value);
  Statement& Bind(int index, const std::string& value);
  Statement& BindNull(int index);
  Statement& Bind(int index, const std::optional<double>& value);
  Statement& Bind(int index, const std::optional<int64_t>& value);

  // True while a row is available, false when done; an error otherwise.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows, then resets it so that it can be
  // bound and run again.
  absl::Status Run();

  int64_t Int64(int column) const;
  double Double(int column) const;
  std::string Text(int column) const;
  bool IsNull(int column) const;

 private:
  Statement(Database* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Database* db_;
  sqlite3_stmt* stmt_;
};

// Steps `s` to the end, handing each row to `read` (Row read(const
// Statement&)).
template <typename Row, typename Read>
absl::StatusOr<std::vector<Row>> ReadRows(Statement& s, Read read) {
  std::vector<Row> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    out.push_back(read(s));
  }
}

// BEGIN IMMEDIATE ... COMMIT; rolls back on destruction unless Commit()
// succeeded.
class Transaction {
 public:
  static absl::StatusOr<std::unique_ptr<Transaction>> Begin(Database& db);
  ~Transaction();
  absl::Status Commit();

 private:
  explicit Transaction(Database& db) : db_(db) {}
  Database& db_;
  bool done_ = false;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_SQLITE_DB_H_
