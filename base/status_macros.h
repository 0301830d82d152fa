// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which Abseil 20220623 lacks.
#ifndef LRKV_BASE_STATUS_MACROS_H_
#define LRKV_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LRKV_CONCAT_INNER_(a, b) a##b
#define LRKV_CONCAT_(a, b) LRKV_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    ::absl::Status lrkv_status_ = (expr);     \
    if (!lrkv_status_.ok()) return lrkv_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(var, lhs, rexpr) \
  auto var = (rexpr);                           \
  if (!var.ok()) return std::move(var).status(); \
  lhs = std::move(var).value()

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(LRKV_CONCAT_(lrkv_statusor_, __LINE__), lhs, rexpr)

#endif  // LRKV_BASE_STATUS_MACROS_H_
