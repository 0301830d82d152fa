#include "serve/http/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"

namespace lrkv {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using boost::system::error_code;
using net::ip::tcp;

std::string HttpClientResponse::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(n, name)) return v;
  }
  return "";
}

namespace {

absl::Status ReadFailed(const error_code& ec, const char* what) {
  if (ec == net::error::would_block || ec == net::error::try_again ||
      ec == net::error::timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
  }
  return absl::DataLossError(absl::StrCat(what, ": ", ec.message()));
}

void SetTimeouts(tcp::socket& s, std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

absl::StatusOr<HttpClientResponse> HttpFetch(
    const std::string& host, int port, const HttpClientRequest& request,
    std::chrono::milliseconds timeout,
    const std::function<bool(std::string_view)>& on_body) {
  net::io_context io;
  tcp::socket socket(io);
  error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, "' is not an IP address"));
  socket.connect(tcp::endpoint(address, static_cast<unsigned short>(port)), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":",
                                               port, ": ", ec.message()));
  }
  SetTimeouts(socket, timeout);
  http::request<http::string_body> req;
  req.method_string(request.method);
  req.target(request.target);
  req.version(11);
  req.set(http::field::host, absl::StrCat(host, ":", port));
  for (const auto& [name, value] : request.headers) req.set(name, value);
  req.body() = request.body;
  if (!request.body.empty() || request.method == "POST") req.prepare_payload();
  http::write(socket, req, ec);
  if (ec) return ReadFailed(ec, "sending the request");

  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  for (;;) {  // interim 1xx responses come before the final one
    parser.emplace();
    // Not boost::none: Beast 1.74 compares a Content-Length against an empty
    // limit as if it were exceeded.
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(socket, buffer, *parser, ec);
    if (ec) return ReadFailed(ec, "reading the response head");
    const int status = parser->get().result_int();
    if (status >= 200 || status == 101) break;
  }
  HttpClientResponse out;
  out.status = parser->get().result_int();
  for (const auto& f : parser->get()) {
    out.headers.emplace_back(std::string(f.name_string()),
                             std::string(f.value()));
  }
  char piece[16 << 10];
  while (!parser->is_done()) {
    parser->get().body().data = piece;
    parser->get().body().size = sizeof piece;
    http::read(socket, buffer, *parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return ReadFailed(ec, "reading the response body");
    const size_t n = sizeof piece - parser->get().body().size;
    if (n == 0) continue;
    if (!on_body) {
      out.body.append(piece, n);
    } else if (!on_body(std::string_view(piece, n))) {
      out.abandoned = true;
      socket.close(ec);
      return out;
    }
  }
  return out;
}

}  // namespace lrkv
