#include "serve/http/http_connection.h"

#include <poll.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lrkv {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using boost::system::error_code;

// --- the exchange, as the handler's thread sees it ---------------------------

bool HttpExchangeState::ClaimAnswer() {
  std::lock_guard<std::mutex> lock(mu_);
  if (answered_) return false;
  answered_ = true;
  return true;
}

void HttpExchangeState::Respond(HttpResponseHead head, std::string body) {
  if (!ClaimAnswer()) return;
  connection_->Post([c = connection_, head = std::move(head),
                     body = std::move(body)]() mutable {
    c->DoRespond(head, std::move(body));
  });
}

void HttpExchangeState::BeginStream(HttpResponseHead head, std::string probe) {
  if (!ClaimAnswer()) return;
  connection_->Post([c = connection_, head = std::move(head),
                     probe = std::move(probe)]() mutable {
    c->DoBeginStream(head, std::move(probe));
  });
}

bool HttpExchangeState::Write(std::string_view data) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return false;
    if (data.empty()) return true;  // an empty chunk would end the body
    seq = ++writes_posted_;
  }
  connection_->Post([c = connection_, self = shared_from_this(),
                     d = std::string(data),
                     seq]() mutable { c->DoWrite(std::move(d), self, seq); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return gone_ || writes_done_ >= seq; });
  return !gone_;
}

void HttpExchangeState::EndStream() {
  connection_->Post([c = connection_] { c->DoEndStream(); });
}

bool HttpExchangeState::gone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

void HttpExchangeState::OnGone(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_) {
      on_gone_ = std::move(f);
      return;
    }
  }
  f();
}

void HttpExchangeState::MarkGone() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return;
    gone_ = true;
    f = std::move(on_gone_);
  }
  cv_.notify_all();
  if (f) f();
}

void HttpExchangeState::WriteDone(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    writes_done_ = std::max(writes_done_, seq);
  }
  cv_.notify_all();
}

void HttpExchangeState::HandlerReturned() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_gone_ = nullptr;  // what it captured belongs to the handler's frame
  }
  connection_->Post([c = connection_] { c->DoHandlerDone(); });
}

namespace http_internal {
namespace {

// Read this much at a time.
constexpr size_t kReadChunk = 16 << 10;
// While a request is handled, bytes of the next one (pipelined) are read ahead
// up to this; then the socket waits.
constexpr size_t kPipelineBytes = 64 << 10;
// A closing connection drains what the client still sends (so that its
// unread bytes do not turn our last response into a reset) for at most this
// long and this many bytes.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 4 << 20;
// After a probe, the socket is checked for the peer's reset at these delays (on
// loopback the reset is usually in by the time the probe's write completes).
constexpr std::array<std::chrono::milliseconds, 6> kAliveChecks = {
    std::chrono::milliseconds(0),    std::chrono::milliseconds(2),
    std::chrono::milliseconds(20),   std::chrono::milliseconds(200),
    std::chrono::milliseconds(1000), std::chrono::milliseconds(3000)};

std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%g s", d.count() / 1000.0);
}

// Header values go out as given; a CR or LF would split the response.
std::string HeaderSafe(std::string_view v) {
  std::string out(v);
  for (char& c : out) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return out;
}

std::string_view Trimmed(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
    v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
    v.remove_suffix(1);
  return v;
}

std::string StatusLine(int status) {
  const auto reason =
      http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return absl::StrCat(
      "HTTP/1.1 ", status, " ",
      reason.empty() ? std::string("Status") : std::string(reason), "\r\n");
}

std::string Chunk(std::string_view data) {
  return absl::StrCat(absl::Hex(data.size()), "\r\n", std::string(data),
                      "\r\n");
}

}  // namespace

std::string ServerShared::RefusalBytes(int status,
                                       const std::string& message) const {
  const std::string body =
      options.error_body ? options.error_body(status, message) : message;
  std::string out = StatusLine(status);
  absl::StrAppend(
      &out, "Content-Type: ",
      options.error_body ? options.error_content_type : "text/plain",
      "\r\nContent-Length: ", body.size(), "\r\n");
  if (status == 503) absl::StrAppend(&out, "Retry-After: 1\r\n");
  absl::StrAppend(&out, "Connection: close\r\n\r\n", body);
  return out;
}

Connection::Connection(std::shared_ptr<ServerShared> shared,
                       std::unique_ptr<Transport> transport, uint64_t id)
    : shared_(std::move(shared)),
      limits_(shared_->options.limits),
      transport_(std::move(transport)),
      id_(id),
      read_timer_(transport_->socket().get_executor()),
      write_timer_(transport_->socket().get_executor()),
      probe_timer_(transport_->socket().get_executor()) {}

Connection::~Connection() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->open.erase(id_);
}

void Connection::Post(std::function<void()> f) {
  net::post(transport_->socket().get_executor(), std::move(f));
}

void Connection::Start() {
  phase_ = Phase::kHandshake;
  if (!transport_->tls()) return BeginRequest();
  ArmReadTimer(limits_.request_timeout);
  transport_->AsyncHandshake([self = shared_from_this()](error_code ec) {
    if (self->dead_) return;
    if (ec) return self->Die(false);
    self->BeginRequest();
  });
}

void Connection::Drain() {
  if (phase_ == Phase::kIdle && in_.size() == 0) Die(false);
}

void Connection::Die(bool client_gone) {
  if (dead_) return;
  dead_ = true;
  ++read_generation_;
  ++write_generation_;
  read_timer_.cancel();
  write_timer_.cancel();
  probe_timer_.cancel();
  transport_->Close();
  std::deque<PendingWrite> failed;
  failed.swap(writes_);
  for (PendingWrite& w : failed) {
    if (w.done) w.done(false);
  }
  if (exchange_ != nullptr) {
    if (client_gone && !response_whole_) ++shared_->clients_gone;
    // Late writes (of a whole response too) return at once.
    exchange_->MarkGone();
    EndExchangeCount();
    if (handler_done_) exchange_.reset();
  }
}

void Connection::EndExchangeCount() {
  if (!exchange_counted_) return;
  exchange_counted_ = false;
  --shared_->active_exchanges;
}

// --- reading
// ------------------------------------------------------------------

void Connection::BeginRequest() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
  parser_->body_limit(limits_.max_body_bytes);
  header_checked_ = false;
  if (in_.size() > 0) {
    phase_ = Phase::kReading;
    ArmReadTimer(limits_.request_timeout);
    ParseBuffered();
  } else if (peer_eof_ || shared_->draining) {
    return Die(false);
  } else {
    phase_ = Phase::kIdle;
    ArmReadTimer(limits_.idle_timeout);
  }
  EnsureReading();
}

bool Connection::WantRead() const {
  if (dead_ || reading_ || peer_eof_) return false;
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kReading:
    case Phase::kClosing:
      return true;
    case Phase::kHandling:
      return in_.size() < kPipelineBytes;
    default:
      return false;
  }
}

void Connection::EnsureReading() {
  if (!WantRead()) return;
  reading_ = true;
  transport_->AsyncReadSome(
      in_.prepare(kReadChunk),
      [self = shared_from_this()](error_code ec, size_t n) {
        self->OnRead(ec, n);
      });
}

void Connection::OnRead(error_code ec, size_t n) {
  reading_ = false;
  if (dead_) return;
  if (ec) {
    if (IsPeerEof(ec)) return OnPeerEof();
    return Die(true);
  }
  in_.commit(n);
  switch (phase_) {
    case Phase::kIdle:
      phase_ = Phase::kReading;
      ArmReadTimer(limits_.request_timeout);
      ParseBuffered();
      break;
    case Phase::kReading:
      ParseBuffered();
      break;
    case Phase::kRefusing:
    case Phase::kClosing:
      in_.consume(in_.size());
      lingered_ += n;
      if (lingered_ > kLingerBytes) return Die(false);
      break;
    default:  // kHandling: a pipelined request waits in the buffer
      break;
  }
  EnsureReading();
}

void Connection::OnPeerEof() {
  peer_eof_ = true;
  switch (phase_) {
    case Phase::kHandling:
      // A half-close after the request, or a client gone: answered if it is
      // still there (the probe tells), abandoned if not.
      if (!response_whole_) Probe();
      return;
    case Phase::kRefusing:
      return;  // the refusal is still written; then closed
    default:
      // Idle, or a request cut short: no one to answer.
      return Die(false);
  }
}

void Connection::ParseBuffered() {
  for (;;) {
    if (parser_->is_header_done() && !header_checked_) {
      header_checked_ = true;
      if (!CheckHeader()) return;
    }
    if (parser_->is_done()) return Dispatch();
    if (in_.size() == 0) return;
    error_code ec;
    const size_t used = parser_->put(in_.data(), ec);
    in_.consume(used);
    if (ec == http::error::need_more) {
      if (parser_->is_header_done() && !header_checked_) continue;
      return;
    }
    if (ec == http::error::header_limit) {
      ++shared_->refused_header;
      return Refuse(431, absl::StrCat("the request line and headers exceed ",
                                      limits_.max_header_bytes, " bytes"));
    }
    if (ec == http::error::body_limit) {
      ++shared_->refused_body;
      return Refuse(413, absl::StrCat("the request body exceeds ",
                                      limits_.max_body_bytes, " bytes"));
    }
    if (ec == http::error::bad_transfer_encoding) {
      return Refuse(501, "only the chunked transfer coding is supported");
    }
    if (ec)
      return Refuse(400,
                    absl::StrCat("malformed HTTP request: ", ec.message()));
    if (used == 0 && !parser_->is_done() &&
        !(parser_->is_header_done() && !header_checked_)) {
      return;
    }
  }
}

bool Connection::CheckHeader() {
  const auto& fields = parser_->get();
  const auto count =
      static_cast<size_t>(std::distance(fields.begin(), fields.end()));
  if (count > limits_.max_headers) {
    ++shared_->refused_header;
    Refuse(431,
           absl::StrCat("the request has ", count, " header fields; at most ",
                        limits_.max_headers, " are accepted"));
    return false;
  }
  const std::string_view encoding = fields[http::field::content_encoding];
  if (!encoding.empty() && !beast::iequals(encoding, "identity")) {
    ++shared_->refused_body;
    Refuse(415, absl::StrCat("Content-Encoding '", std::string(encoding),
                             "' is not accepted: send the body uncompressed"));
    return false;
  }
  // Beast decodes chunked framing and ignores codings before it; a body
  // gzip-coded under "gzip, chunked" would be read as plain text.
  const std::string_view coding = fields[http::field::transfer_encoding];
  if (!coding.empty() && !beast::iequals(Trimmed(coding), "chunked")) {
    ++shared_->refused_body;
    Refuse(501, absl::StrCat("Transfer-Encoding '", std::string(coding),
                             "' is not supported: only chunked"));
    return false;
  }
  const auto length = parser_->content_length();
  if (length && *length > limits_.max_body_bytes) {
    ++shared_->refused_body;
    Refuse(413, absl::StrCat("the request body (Content-Length ", *length,
                             ") exceeds ", limits_.max_body_bytes, " bytes"));
    return false;
  }
  const http::verb method = fields.method();
  const bool wants_body = method == http::verb::post ||
                          method == http::verb::put ||
                          method == http::verb::patch;
  if (wants_body && !length && !parser_->chunked()) {
    ++shared_->refused_body;
    Refuse(411, "a request body needs a Content-Length or chunked framing");
    return false;
  }
  if (!parser_->is_done() &&
      beast::iequals(fields[http::field::expect], "100-continue")) {
    Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  return true;
}

void Connection::Dispatch() {
  CancelReadTimer();
  http::request<http::string_body> message = parser_->release();
  parser_.reset();
  keep_alive_ = message.keep_alive();
  if (shared_->draining) return Refuse(503, "the server is shutting down");
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& f : message) {
    request.headers.emplace_back(std::string(f.name_string()),
                                 std::string(f.value()));
  }
  request.body = std::move(message.body());
  phase_ = Phase::kHandling;
  handler_done_ = head_sent_ = response_whole_ = chunked_ = probed_ = false;
  close_after_ = !keep_alive_;
  probe_chunk_.clear();
  exchange_ = std::make_shared<HttpExchangeState>(shared_from_this(),
                                                  std::move(request));
  ++shared_->active_exchanges;
  exchange_counted_ = true;
  shared_->pool->Submit([state = exchange_, shared = shared_] {
    HttpExchange exchange(state);
    try {
      shared->handler(exchange);
    } catch (...) {
      // Answered 500 below, as a handler that did not answer.
    }
    state->HandlerReturned();
  });
  if (peer_eof_) Probe();
}

void Connection::Refuse(int status, const std::string& message) {
  CancelReadTimer();
  phase_ = Phase::kRefusing;
  if (shared_->options.on_refusal) shared_->options.on_refusal(status);
  Enqueue(shared_->RefusalBytes(status, message),
          [self = shared_from_this()](bool ok) {
            if (ok) self->CloseGracefully();
          });
}

// --- a client gone
// ------------------------------------------------------------

void Connection::Probe() {
  if (probed_ || dead_) return;
  std::string bytes;
  if (!head_sent_) {
    // An interim response every HTTP/1.1 client must accept before the final
    // one; a socket already closed answers it with RST.
    bytes = "HTTP/1.1 100 Continue\r\n\r\n";
  } else if (chunked_ && !probe_chunk_.empty()) {
    bytes = Chunk(probe_chunk_);
  } else {
    return;  // the response's own writes will tell
  }
  probed_ = true;
  Enqueue(std::move(bytes), [self = shared_from_this()](bool ok) {
    if (ok) self->CheckAlive(0);
  });
}

void Connection::CheckAlive(size_t attempt) {
  if (dead_ || attempt >= kAliveChecks.size() || exchange_ == nullptr) return;
  probe_timer_.expires_after(kAliveChecks[attempt]);
  probe_timer_.async_wait([self = shared_from_this(), attempt](error_code ec) {
    if (ec || self->dead_ || self->exchange_ == nullptr ||
        self->response_whole_)
      return;
    pollfd p{self->transport_->socket().native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0) {
      return self->Die(true);
    }
    self->CheckAlive(attempt + 1);
  });
}

// --- writing
// ------------------------------------------------------------------

std::string Connection::Head(const HttpResponseHead& head, bool chunked,
                             size_t length) {
  if (peer_eof_ || shared_->draining) close_after_ = true;
  std::string out = StatusLine(head.status);
  if (!head.content_type.empty()) {
    absl::StrAppend(&out, "Content-Type: ", HeaderSafe(head.content_type),
                    "\r\n");
  }
  for (const auto& [name, value] : head.headers) {
    absl::StrAppend(&out, HeaderSafe(name), ": ", HeaderSafe(value), "\r\n");
  }
  absl::StrAppend(&out,
                  chunked ? std::string("Transfer-Encoding: chunked")
                          : absl::StrCat("Content-Length: ", length),
                  "\r\n", close_after_ ? "Connection: close\r\n" : "", "\r\n");
  return out;
}

void Connection::DoRespond(const HttpResponseHead& head, std::string body) {
  if (dead_ || head_sent_) return;
  head_sent_ = response_whole_ = true;
  std::string bytes = Head(head, false, body.size());
  bytes += body;
  Enqueue(std::move(bytes));
}

void Connection::DoBeginStream(const HttpResponseHead& head,
                               std::string probe) {
  if (dead_ || head_sent_) return;
  head_sent_ = chunked_ = true;
  probe_chunk_ = std::move(probe);
  Enqueue(Head(head, true, 0));
}

void Connection::DoWrite(std::string data,
                         std::shared_ptr<HttpExchangeState> state,
                         uint64_t seq) {
  if (dead_ || !chunked_ || response_whole_) return state->MarkGone();
  Enqueue(Chunk(data), [state, seq](bool ok) {
    if (ok) state->WriteDone(seq);
  });
}

void Connection::DoEndStream() {
  if (dead_ || !chunked_ || response_whole_) return;
  response_whole_ = true;
  Enqueue("0\r\n\r\n");
}

void Connection::DoHandlerDone() {
  handler_done_ = true;
  if (dead_) {
    exchange_.reset();  // it holds the connection: the pair would outlive both
    return;
  }
  if (!head_sent_) {
    head_sent_ = response_whole_ = true;
    close_after_ = true;
    Enqueue(
        shared_->RefusalBytes(500, "the server failed to answer this request"));
  } else if (!response_whole_) {
    // A stream the handler left open: its end cannot be told from a cut, so
    // the connection closes after what was sent.
    response_whole_ = true;
    close_after_ = true;
  }
  MaybeFinishExchange();
}

void Connection::Enqueue(std::string bytes, std::function<void(bool)> done) {
  if (dead_) {
    if (done) done(false);
    return;
  }
  writes_.push_back({std::move(bytes), std::move(done)});
  if (!writing_) WriteNext();
}

void Connection::WriteNext() {
  writing_ = true;
  const uint64_t generation = ++write_generation_;
  write_timer_.expires_after(limits_.write_timeout);
  write_timer_.async_wait(
      [self = shared_from_this(), generation](error_code ec) {
        if (ec || generation != self->write_generation_ || self->dead_) return;
        self->Die(true);  // the client stopped reading
      });
  const std::string& bytes = writes_.front().bytes;
  transport_->AsyncWrite(net::buffer(bytes.data(), bytes.size()),
                         [self = shared_from_this()](error_code ec, size_t) {
                           self->writing_ = false;
                           if (self->dead_) return;
                           ++self->write_generation_;
                           self->write_timer_.cancel();
                           PendingWrite w = std::move(self->writes_.front());
                           self->writes_.pop_front();
                           if (ec) {
                             if (w.done) w.done(false);
                             return self->Die(true);
                           }
                           if (w.done) w.done(true);
                           if (self->dead_) return;
                           if (!self->writes_.empty()) return self->WriteNext();
                           self->MaybeFinishExchange();
                         });
}

void Connection::MaybeFinishExchange() {
  if (dead_ || phase_ != Phase::kHandling || !handler_done_ ||
      !response_whole_ || writing_ || !writes_.empty()) {
    return;
  }
  probe_timer_.cancel();
  EndExchangeCount();
  exchange_.reset();
  if (close_after_ || peer_eof_ || shared_->draining) return CloseGracefully();
  BeginRequest();
}

void Connection::CloseGracefully() {
  if (dead_) return;
  if (peer_eof_) return Die(false);
  phase_ = Phase::kClosing;
  transport_->ShutdownSend();
  lingered_ = 0;
  ArmReadTimer(
      std::chrono::duration_cast<std::chrono::milliseconds>(kLingerTime));
  EnsureReading();
}

// --- the read deadline
// ----------------------------------------------------------

void Connection::ArmReadTimer(std::chrono::milliseconds after) {
  const uint64_t generation = ++read_generation_;
  read_timer_.expires_after(after);
  read_timer_.async_wait(
      [self = shared_from_this(), generation](error_code ec) {
        if (ec || generation != self->read_generation_ || self->dead_) return;
        self->OnReadDeadline();
      });
}

void Connection::CancelReadTimer() {
  ++read_generation_;
  read_timer_.cancel();
}

void Connection::OnReadDeadline() {
  switch (phase_) {
    case Phase::kReading:
      ++shared_->timed_out;
      return Refuse(408,
                    absl::StrCat("the request did not arrive whole within ",
                                 Seconds(limits_.request_timeout)));
    case Phase::kHandshake:
    case Phase::kIdle:
      ++shared_->timed_out;
      return Die(false);
    case Phase::kClosing:
      return Die(false);
    default:
      return;
  }
}

}  // namespace http_internal
}  // namespace lrkv
