// Result rows by proto reflection (see proto_rows.h).
#include "service/proto_rows.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lrkv::service {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The message's columns, in field order.
std::vector<const FieldDescriptor*> Columns(const Descriptor& d) {
  std::vector<const FieldDescriptor*> out;
  for (int i = 0; i < d.field_count(); ++i) out.push_back(d.field(i));
  return out;
}

}  // namespace

std::string InsertSql(const ProtoTable& t, const Descriptor& d) {
  std::vector<std::string> names = {"job_id"};
  for (const FieldDescriptor* f : Columns(d)) names.push_back(f->name());
  std::vector<std::string> marks(names.size(), "?");
  return absl::StrCat("INSERT OR REPLACE INTO ", t.table, " (",
                      absl::StrJoin(names, ", "), ") VALUES (",
                      absl::StrJoin(marks, ", "), ")");
}

std::string SelectSql(const ProtoTable& t, const Descriptor& d) {
  std::vector<std::string> names;
  for (const FieldDescriptor* f : Columns(d)) names.push_back(f->name());
  return absl::StrCat("SELECT ", absl::StrJoin(names, ", "), " FROM ", t.table,
                      " WHERE job_id = ? ORDER BY ", t.order_by);
}

void BindFields(const Message& row, Statement& s) {
  const Reflection& r = *row.GetReflection();
  int index = 2;
  for (const FieldDescriptor* f : Columns(*row.GetDescriptor())) {
    const int i = index++;
    if (f->has_presence() && !r.HasField(row, f)) {
      s.BindNull(i);
      continue;
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        s.Bind(i, r.GetString(row, f));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        s.Bind(i, int64_t{r.GetBool(row, f)});
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        s.Bind(i, int64_t{r.GetInt32(row, f)});
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        s.Bind(i, int64_t{r.GetInt64(row, f)});
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        s.Bind(i, r.GetDouble(row, f));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        s.Bind(i, static_cast<double>(r.GetFloat(row, f)));
        break;
      default:  // messages, enums, unsigned: no result table has one
        s.BindNull(i);
    }
  }
}

void ReadFields(const Statement& s, Message* row) {
  const Reflection& r = *row->GetReflection();
  int column = 0;
  for (const FieldDescriptor* f : Columns(*row->GetDescriptor())) {
    const int c = column++;
    if (s.IsNull(c)) continue;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        r.SetString(row, f, s.Text(c));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r.SetBool(row, f, s.Int64(c) != 0);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        r.SetInt32(row, f, static_cast<int32_t>(s.Int64(c)));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        r.SetInt64(row, f, s.Int64(c));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        r.SetDouble(row, f, s.Double(c));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        r.SetFloat(row, f, static_cast<float>(s.Double(c)));
        break;
      default:
        break;
    }
  }
}

}  // namespace lrkv::service
