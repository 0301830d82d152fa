// The one place where absl::Status becomes a grpc::Status (as Triton's
// grpc_utils does).
#ifndef LRKV_SERVICE_GRPC_STATUS_H_
#define LRKV_SERVICE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace lrkv::service {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // Both enums are google.rpc.Code: the same names with the same numbers.
  const int value = static_cast<int>(s.code());
  const grpc::StatusCode code =
      value > 0 && value <= grpc::StatusCode::UNAUTHENTICATED
          ? static_cast<grpc::StatusCode>(value)
          : grpc::StatusCode::UNKNOWN;
  return grpc::Status(code, std::string(s.message()));
}

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_GRPC_STATUS_H_
