// The one place `lrkv serve` turns an absl::Status into an HTTP status and the
// OpenAI API's error body: {"error": {"message", "type", "param", "code"}}.
#ifndef LRKV_SERVE_HTTP_ERRORS_H_
#define LRKV_SERVE_HTTP_ERRORS_H_

#include <string>

#include "absl/status/status.h"

namespace lrkv {

// 400 InvalidArgument / FailedPrecondition / OutOfRange, 401 Unauthenticated,
// 403 PermissionDenied, 404 NotFound, 429 ResourceExhausted (the server is
// full), 501 Unimplemented, 503 Unavailable, 500 the rest.
int HttpStatusOf(const absl::Status& status);
// The error body for `status` (not OK).
std::string OpenAiErrorBody(const absl::Status& status);

// An error body for a status made here rather than from a Status (the server's
// own 404 for an unknown path, 405, and the HTTP layer's refusals: 408, 411,
// 413, 415, 431, 501, 503).
std::string OpenAiErrorBody(int http_status, const std::string& message);

}  // namespace lrkv

#endif  // LRKV_SERVE_HTTP_ERRORS_H_
