// The HTTP/1.1 server under `lrkv serve`: Boost.Beast's parser over Boost.Asio
// sockets (Debian's libboost-dev; HTTPS through Asio's OpenSSL stream), with
// the limits an edge server needs. Reading is asynchronous on one I/O thread,
// so a slow client costs a buffer, never a thread; a complete request is handed
// to a worker thread, whose handler answers it whole or streams it.
//
// What a client can make the server hold is bounded (docs/reliability.md):
//   - the request line and header section: HttpLimits::max_header_bytes, the
//     header fields: max_headers (431 beyond either);
//   - the body: max_body_bytes, checked against Content-Length before a byte of
//     the body is read and counted as it arrives for chunked bodies (413); a
//     POST with neither Content-Length nor chunked framing is 411; a body with
//     a Content-Encoding is 415 (nothing is inflated);
//   - time: an idle connection is closed after idle_timeout, a request must
//     arrive whole within request_timeout of its first byte (408), a response
//     write the client does not take within write_timeout drops the connection;
//   - connections: max_connections open at once (503 and closed beyond).
// Pipelined requests are answered in order; a request followed by a half-close
// is answered. A client that leaves while its request is handled is noticed
// (its connection's read side is watched; a peer that sent FIN is probed with
// an interim `100 Continue`, which a closed socket answers with RST) and the
// exchange's OnClientGone callback runs, so that no work is done for it.
#ifndef LRKV_SERVE_HTTP_HTTP_SERVER_H_
#define LRKV_SERVE_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lrkv {

struct HttpLimits {
  /// Request line and header fields together, in bytes (431 beyond).
  size_t max_header_bytes = 16 << 10;
  /// Header fields of one request (431 beyond).
  size_t max_headers = 100;
  /// Request body, in bytes, however it is framed (413 beyond).
  size_t max_body_bytes = size_t{1} << 20;
  /// A kept-alive connection with no request begun is closed after this.
  std::chrono::milliseconds idle_timeout{30000};
  /// A request (the TLS handshake, the request line, the headers and the body)
  /// must arrive whole within this of its first byte (408 otherwise).
  std::chrono::milliseconds request_timeout{10000};
  /// A response write the client does not take within this drops the
  /// connection.
  std::chrono::milliseconds write_timeout{30000};
  /// Connections open at once; one more is answered 503 and closed.
  int64_t max_connections = 256;

  absl::Status Validate() const;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  /// 0: any free port (Bind returns it).
  int port = 8080;
  /// PEM certificate chain and private key: HTTPS (both or neither).
  std::string tls_cert;
  std::string tls_key;
  HttpLimits limits;
  /// Handlers running at once (a streamed response holds one for its length);
  /// complete requests beyond them wait for one.
  int64_t workers = 16;
  /// The body of a refusal the server makes itself (431, 413, 408...): the
  /// application's error form. Default: the message as text/plain.
  std::function<std::string(int status, const std::string& message)> error_body;
  std::string error_content_type = "text/plain";
  /// Called for every response the server makes without a handler (the
  /// refusals), with its status: metrics.
  std::function<void(int status)> on_refusal;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // the target up to '?'
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The first field named `name` (case-insensitive); empty if none.
  std::string_view Header(std::string_view name) const;
};

struct HttpResponseHead {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpExchangeState;

// One request and its response, as a handler sees it (valid during the
// handler). A handler answers with Respond, or with BeginStream, Write... and
// EndStream; one that returns without answering is answered 500. All methods
// are thread-safe.
class HttpExchange {
 public:
  explicit HttpExchange(std::shared_ptr<HttpExchangeState> state)
      : state_(std::move(state)) {}

  const HttpRequest& request() const;
  // The whole response.
  void Respond(HttpResponseHead head, std::string body);
  // A chunked response: the head now, then Write per chunk. `probe` is a chunk
  // the server may send to learn whether a silent client is still there (for
  // server-sent events, a comment line); empty: none.
  void BeginStream(HttpResponseHead head, std::string probe);
  // Sends one chunk and waits until the client's socket took it; false when
  // the client is gone (or stopped reading for HttpLimits::write_timeout).
  bool Write(std::string_view data);
  void EndStream();

  // Whether the client has left (or the server is stopping).
  bool client_gone() const;
  // `f` runs once, on the I/O thread, when the client leaves before its
  // response is whole (at once if it has): it must be quick and thread-safe.
  void OnClientGone(std::function<void()> f);

 private:
  std::shared_ptr<HttpExchangeState> state_;
};

struct HttpServerStats {
  int64_t open_connections = 0;
  int64_t accepted = 0;
  /// Refusals the server made itself, by reason.
  int64_t refused_header = 0;  // 431
  int64_t refused_body = 0;    // 413, 411, 415
  int64_t timed_out = 0;       // 408 or an idle connection closed
  int64_t over_capacity = 0;   // 503: max_connections
  int64_t clients_gone = 0;    // left while their request was handled
};

class HttpServer {
 public:
  using Handler = std::function<void(HttpExchange&)>;

  // Refuses limits out of range, half a TLS pair, a certificate or key that
  // does not load, or a key that does not belong to the certificate.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      HttpServerOptions options, Handler handler);
  ~HttpServer();

  // Binds the address; returns the port (options.port, or the one taken).
  absl::StatusOr<int> Bind();
  // Serves until Stop (blocks; the calling thread is the I/O thread).
  void Run();
  // From now on no connection is accepted and no new request is handed to the
  // handler (each is answered 503 and its connection closed); exchanges in
  // progress go on.
  void BeginShutdown();
  // Exchanges still open: requests handed to a handler whose response is not
  // yet written whole.
  int64_t ActiveExchanges() const;
  // Closes every connection (exchanges in progress see their client gone) and
  // makes Run return once the handlers have returned.
  void Stop();

  HttpServerStats Stats() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lrkv

#endif  // LRKV_SERVE_HTTP_HTTP_SERVER_H_
