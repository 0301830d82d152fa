// A job's result rows described once, by their proto message (lrkv.proto):
// the SQL table has a job_id column and one column per field of the message,
// with the field's name, written and read by reflection. The store, the report
// lrkvd serves and its JSON (protobuf's printer, field names as declared) are
// then one description: a new field is its line in lrkv.proto and its column
// in a store migration (a table missing a column fails the round trip in
// store_test).
#ifndef LRKV_SERVICE_PROTO_ROWS_H_
#define LRKV_SERVICE_PROTO_ROWS_H_

#include <google/protobuf/message.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "service/sqlite_db.h"

namespace lrkv::service {

// A table of `Message` rows: its name and the columns that order a job's rows.
struct ProtoTable {
  const char* table;
  const char* order_by;
};

// "INSERT OR REPLACE INTO t (job_id, f1, f2, ...) VALUES (?, ?, ...)" and
// "SELECT f1, f2, ... FROM t WHERE job_id = ? ORDER BY ...", from the
// message's scalar fields (string, bool, integers, floating point; a proto3
// `optional` field unset is NULL).
std::string InsertSql(const ProtoTable& t,
                      const google::protobuf::Descriptor& d);
std::string SelectSql(const ProtoTable& t,
                      const google::protobuf::Descriptor& d);

// Binds `row`'s fields after the job id (1-based index 2 on).
void BindFields(const google::protobuf::Message& row, Statement& s);
// Sets `row`'s fields from the current result row of a SelectSql statement.
void ReadFields(const Statement& s, google::protobuf::Message* row);

// Writes `rows` for `job_id` in one transaction (replacing rows of the same
// key).
template <typename M>
absl::Status InsertRows(Database& db, const ProtoTable& t,
                        const std::string& job_id, const std::vector<M>& rows) {
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(db));
  const std::string sql = InsertSql(t, *M::descriptor());
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(db, sql.c_str()));
  for (const M& row : rows) {
    s.Bind(1, job_id);
    BindFields(row, s);
    RETURN_IF_ERROR(s.Run());
  }
  return tx->Commit();
}

// `job_id`'s rows, in the table's order.
template <typename M>
absl::StatusOr<std::vector<M>> SelectRows(Database& db, const ProtoTable& t,
                                          const std::string& job_id) {
  const std::string sql = SelectSql(t, *M::descriptor());
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(db, sql.c_str()));
  s.Bind(1, job_id);
  return ReadRows<M>(s, [](const Statement& q) {
    M row;
    ReadFields(q, &row);
    return row;
  });
}

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_PROTO_ROWS_H_
