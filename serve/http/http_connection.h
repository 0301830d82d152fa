// One HTTP/1.1 connection of HttpServer (http_server.h) and the exchange state
// its handler shares with it. Everything a connection does runs on its strand:
// one read loop that parses requests (Beast's parser fed by hand, so that the
// same loop reads a request, then watches the socket while the request is
// handled, then finds a pipelined one already buffered), one write queue, and
// the read, write and probe timers.
#ifndef LRKV_SERVE_HTTP_HTTP_CONNECTION_H_
#define LRKV_SERVE_HTTP_HTTP_CONNECTION_H_

#include <atomic>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "serve/http/http_server.h"
#include "serve/http/transport.h"
#include "serve/http/worker_pool.h"

namespace lrkv {

namespace http_internal {

class Connection;

// What the server and its connections share; outlives every connection.
struct ServerShared {
  HttpServerOptions options;
  HttpServer::Handler handler;
  std::unique_ptr<WorkerPool> pool;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> active_exchanges{0};
  // Stats.
  std::atomic<int64_t> accepted{0}, refused_header{0}, refused_body{0},
      timed_out{0}, over_capacity{0}, clients_gone{0};
  // Open connections by id (Stop and BeginShutdown reach them here).
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<Connection>> open;
  uint64_t next_id = 0;

  // The bytes of a whole response the server makes itself.
  std::string RefusalBytes(int status, const std::string& message) const;
};

}  // namespace http_internal

// The exchange as both sides see it: the handler (any thread) and the
// connection (its strand).
class HttpExchangeState
    : public std::enable_shared_from_this<HttpExchangeState> {
 public:
  HttpExchangeState(std::shared_ptr<http_internal::Connection> connection,
                    HttpRequest request)
      : connection_(std::move(connection)), request_(std::move(request)) {}

  const HttpRequest& request() const { return request_; }
  void Respond(HttpResponseHead head, std::string body);
  void BeginStream(HttpResponseHead head, std::string probe);
  bool Write(std::string_view data);
  void EndStream();
  bool gone() const;
  void OnGone(std::function<void()> f);

  // The connection's side.
  void MarkGone();
  void WriteDone(uint64_t seq);
  // The handler returned (runs the worker's last step).
  void HandlerReturned();

 private:
  // Claims the one answer; false if it was given already.
  bool ClaimAnswer();

  std::shared_ptr<http_internal::Connection> connection_;
  const HttpRequest request_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool gone_ = false;
  bool answered_ = false;
  uint64_t writes_posted_ = 0, writes_done_ = 0;
  std::function<void()> on_gone_;
};

namespace http_internal {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerShared> shared,
             std::unique_ptr<Transport> transport, uint64_t id);
  ~Connection();

  // Runs `f` on the connection's strand.
  void Post(std::function<void()> f);
  // On the strand: the TLS handshake, then requests.
  void Start();
  // On the strand: an idle connection closes now (the server is draining).
  void Drain();
  // On the strand: closes the connection; an exchange in progress sees its
  // client gone.
  void Die(bool client_gone);

  // The exchange's requests, on the strand.
  void DoRespond(const HttpResponseHead& head, std::string body);
  void DoBeginStream(const HttpResponseHead& head, std::string probe);
  void DoWrite(std::string data, std::shared_ptr<HttpExchangeState> state,
               uint64_t seq);
  void DoEndStream();
  void DoHandlerDone();

 private:
  enum class Phase {
    kHandshake,  // TLS handshake under way
    kIdle,       // waiting for a request's first byte
    kReading,    // a request begun
    kHandling,   // the handler has it; the socket is watched
    kRefusing,   // a refusal being written; then closed
    kClosing,    // our side shut; draining what the client still sends
  };
  struct PendingWrite {
    std::string bytes;
    std::function<void(bool)> done;  // may be empty
  };

  void BeginRequest();
  bool WantRead() const;
  void EnsureReading();
  void OnRead(boost::system::error_code ec, size_t n);
  void OnPeerEof();
  // Feeds the buffered bytes to the parser: checks the header once it is
  // whole, dispatches a whole request, refuses a bad one.
  void ParseBuffered();
  // The header's checks (counts, framing, encoding); false: refused.
  bool CheckHeader();
  void Dispatch();
  void Refuse(int status, const std::string& message);
  void Probe();
  void CheckAlive(size_t attempt);
  void Enqueue(std::string bytes, std::function<void(bool)> done = {});
  void WriteNext();
  void MaybeFinishExchange();
  // The exchange no longer counts as active (its response is out, or its
  // connection gone); once.
  void EndExchangeCount();
  void CloseGracefully();
  std::string Head(const HttpResponseHead& head, bool chunked, size_t length);

  void ArmReadTimer(std::chrono::milliseconds after);
  void CancelReadTimer();
  void OnReadDeadline();

  const std::shared_ptr<ServerShared> shared_;
  const HttpLimits& limits_;
  std::unique_ptr<Transport> transport_;
  const uint64_t id_;
  boost::asio::steady_timer read_timer_, write_timer_, probe_timer_;
  uint64_t read_generation_ = 0, write_generation_ = 0;

  Phase phase_ = Phase::kHandshake;
  bool dead_ = false;
  bool reading_ = false;
  bool peer_eof_ = false;
  size_t lingered_ = 0;
  boost::beast::flat_buffer in_;
  std::optional<
      boost::beast::http::request_parser<boost::beast::http::string_body>>
      parser_;
  bool header_checked_ = false;
  bool keep_alive_ = true;

  std::deque<PendingWrite> writes_;
  bool writing_ = false;

  // The exchange in progress (kHandling).
  std::shared_ptr<HttpExchangeState> exchange_;
  bool handler_done_ = false;
  bool exchange_counted_ = false;
  bool head_sent_ = false;       // a response head is queued
  bool response_whole_ = false;  // its last byte is queued
  bool chunked_ = false;
  bool close_after_ = false;
  bool probed_ = false;
  std::string probe_chunk_;
};

}  // namespace http_internal
}  // namespace lrkv

#endif  // LRKV_SERVE_HTTP_HTTP_CONNECTION_H_
