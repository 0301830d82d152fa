// Requests whose text fields hold invalid UTF-8 answer INVALID_ARGUMENT naming the field.
//
// proto3 string fields must be UTF-8, and protobuf's C++ parser refuses a message whose
// strings are not; gRPC then answers the call INTERNAL with an empty message before the
// server sees it — the client cannot tell its own bad bytes from a server fault. This
// header replaces gRPC's protobuf SerializationTraits for the messages' base type: the
// same serialization and parse, and when the parse fails, a second look at the raw
// fields (protobuf's UnknownFieldSet, no UTF-8 check) against the message's descriptor
// to name the string field at fault. It is force-included (-include) in every
// translation unit that uses the generated API (proto/CMakeLists.txt), so that every
// instantiation of the traits sees the same specialization.
#ifndef LRKV_PROTO_UTF8_REQUEST_TRAITS_H_
#define LRKV_PROTO_UTF8_REQUEST_TRAITS_H_

#ifdef __cplusplus

#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <string>
#include <vector>

namespace lrkv::v1 {
class UploadCheckpointRequest;
class WatchJobRequest;
class GetArtifactRequest;
}  // namespace lrkv::v1

namespace lrkv::proto_internal {

// The last request field a parse on this thread found not to be valid UTF-8
// (empty: none). A client-streamed read (ServerReader<T>::Read) reports only
// that no message came; the handler, on the same thread, asks here why.
inline thread_local std::string last_invalid_utf8_field;

// The field the last failed read on this thread found invalid, cleared; empty
// if the last read did not fail for that.
inline std::string TakeInvalidUtf8Field() {
  std::string out;
  out.swap(last_invalid_utf8_field);
  return out;
}

// The dotted path of the first string field of `bytes` (a `d` message) that is not
// valid UTF-8, looking into message fields; "" when there is none. Recurses only along
// the schema's own message fields, never on the sender's nesting.
inline std::string FirstInvalidUtf8Field(const google::protobuf::Descriptor* d,
                                         const std::string& bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return "";
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields.field(i);
    if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* fd = d->FindFieldByNumber(f.number());
    if (fd == nullptr) continue;
    if (fd->type() == google::protobuf::FieldDescriptor::TYPE_STRING &&
        !google::protobuf::internal::IsStructurallyValidUTF8(f.length_delimited().data(),
                                                             static_cast<int>(
                                                                 f.length_delimited().size()))) {
      return fd->name();
    }
    if (fd->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      const std::string inner = FirstInvalidUtf8Field(fd->message_type(), f.length_delimited());
      if (!inner.empty()) return fd->name() + "." + inner;
    }
  }
  return "";
}

// gRPC's traits for protobuf messages (grpcpp/impl/codegen/proto_utils.h), with the
// second look at a parse that failed.
class Utf8CheckedTraits {
 public:
  static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb,
                                bool* own_buffer) {
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, grpc::protobuf::MessageLite>(msg, bb, own_buffer);
  }
  static grpc::Status Deserialize(grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
    grpc::ByteBuffer kept(*buffer);  // shares the slices: the parse below clears `buffer`
    grpc::Status st = grpc::GenericDeserialize<grpc::ProtoBufferReader, grpc::protobuf::MessageLite>(buffer, msg);
    last_invalid_utf8_field.clear();
    if (st.ok()) return st;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (kept.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    const auto* full = dynamic_cast<const google::protobuf::Message*>(msg);
    if (full == nullptr) return st;
    const std::string field = FirstInvalidUtf8Field(full->GetDescriptor(), bytes);
    if (field.empty()) return st;
    last_invalid_utf8_field = field;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "request field '" + field + "' is not valid UTF-8 (proto3 strings are)");
  }
};

}  // namespace lrkv::proto_internal

// The generated unary handlers and stubs (de)serialize through the base type
// (RpcMethodHandler<..., MessageLite, MessageLite>, BlockingUnaryCall likewise): that
// specialization covers every unary message, and only a parse that fails takes the
// second look. Streaming handlers parse their requests through the concrete type's
// traits, so each streamed request type has its own: a server-streamed request's status
// reaches the client; a client-streamed read's is dropped by gRPC (the handler asks
// TakeInvalidUtf8Field why its read failed).
namespace grpc {
template <>
class SerializationTraits<grpc::protobuf::MessageLite, void>
    : public lrkv::proto_internal::Utf8CheckedTraits {};
template <>
class SerializationTraits<lrkv::v1::UploadCheckpointRequest, void>
    : public lrkv::proto_internal::Utf8CheckedTraits {};
template <>
class SerializationTraits<lrkv::v1::WatchJobRequest, void>
    : public lrkv::proto_internal::Utf8CheckedTraits {};
template <>
class SerializationTraits<lrkv::v1::GetArtifactRequest, void>
    : public lrkv::proto_internal::Utf8CheckedTraits {};
}  // namespace grpc

#endif  // __cplusplus

#endif  // LRKV_PROTO_UTF8_REQUEST_TRAITS_H_
