#include "serve/http_errors.h"

#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

// The OpenAI API's error type for an HTTP status.
const char* ErrorType(int http) {
  switch (http) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    default:
      return http >= 400 && http < 500 ? "invalid_request_error"
                                       : "server_error";
  }
}

const char* ErrorCode(int http) {
  switch (http) {
    case 401:
      return "invalid_api_key";
    case 404:
      return "not_found";
    case 408:
      return "request_timeout";
    case 411:
      return "length_required";
    case 413:
      return "request_too_large";
    case 415:
      return "unsupported_content_encoding";
    case 431:
      return "request_header_fields_too_large";
    case 429:
      return "server_busy";
    default:
      return nullptr;
  }
}

}  // namespace

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string OpenAiErrorBody(int http_status, const std::string& message) {
  nlohmann::json error = {{"message", message},
                          {"type", ErrorType(http_status)},
                          {"param", nullptr},
                          {"code", nullptr}};
  if (const char* code = ErrorCode(http_status)) error["code"] = code;
  return nlohmann::json{{"error", error}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string OpenAiErrorBody(const absl::Status& status) {
  return OpenAiErrorBody(HttpStatusOf(status), std::string(status.message()));
}

}  // namespace lrkv
