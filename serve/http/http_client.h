// A blocking HTTP/1.1 client on Boost.Beast for the benchmarks and tests of
// `lrkv serve`: one request per connection, the body whole or handed over as it
// arrives (server-sent events), interim 1xx responses skipped. Plain HTTP only.
#ifndef LRKV_SERVE_HTTP_HTTP_CLIENT_H_
#define LRKV_SERVE_HTTP_HTTP_CLIENT_H_

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

struct HttpClientRequest {
  std::string method = "GET";
  std::string target = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // sent with its Content-Length when not empty
};

struct HttpClientResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // empty when the body went to `on_body`
  // The caller's `on_body` asked to stop: the connection was dropped there.
  bool abandoned = false;

  // The first field named `name` (case-insensitive); empty if none.
  std::string Header(std::string_view name) const;
};

// Sends `request` to host:port (an IP address) on a fresh connection and reads
// the response; each read and write must finish within `timeout`. With
// `on_body`, the body goes to it piece by piece as it arrives; returning false
// drops the connection. Unavailable when the server cannot be reached,
// DeadlineExceeded on a timeout, DataLoss when the response is cut or
// malformed.
absl::StatusOr<HttpClientResponse> HttpFetch(
    const std::string& host, int port, const HttpClientRequest& request,
    std::chrono::milliseconds timeout,
    const std::function<bool(std::string_view)>& on_body = {});

}  // namespace lrkv

#endif  // LRKV_SERVE_HTTP_HTTP_CLIENT_H_
