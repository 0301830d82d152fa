#include "serve/http/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/string.hpp>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "serve/http/http_connection.h"

namespace lrkv {

namespace net = boost::asio;
using boost::system::error_code;
using http_internal::Connection;
using http_internal::ServerShared;
using net::ip::tcp;

absl::Status HttpLimits::Validate() const {
  if (max_header_bytes < 256 || max_header_bytes > (64 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the header limit must be in [256 B, 64 MiB], got ", max_header_bytes));
  }
  if (max_headers < 1)
    return absl::InvalidArgumentError(
        "at least one header field must be allowed");
  if (max_body_bytes < 1)
    return absl::InvalidArgumentError("the body limit must be >= 1 byte");
  for (const auto& [name, d] :
       {std::pair{"idle", idle_timeout}, std::pair{"request", request_timeout},
        std::pair{"write", write_timeout}}) {
    if (d.count() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", name, " timeout must be > 0"));
    }
  }
  if (max_connections < 1)
    return absl::InvalidArgumentError("max_connections must be >= 1");
  return absl::OkStatus();
}

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (boost::beast::iequals(n, name)) return v;
  }
  return {};
}

const HttpRequest& HttpExchange::request() const { return state_->request(); }
void HttpExchange::Respond(HttpResponseHead head, std::string body) {
  state_->Respond(std::move(head), std::move(body));
}
void HttpExchange::BeginStream(HttpResponseHead head, std::string probe) {
  state_->BeginStream(std::move(head), std::move(probe));
}
bool HttpExchange::Write(std::string_view data) { return state_->Write(data); }
void HttpExchange::EndStream() { state_->EndStream(); }
bool HttpExchange::client_gone() const { return state_->gone(); }
void HttpExchange::OnClientGone(std::function<void()> f) {
  state_->OnGone(std::move(f));
}

class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, Handler handler) : acceptor_(io_) {
    shared_ = std::make_shared<ServerShared>();
    shared_->options = std::move(options);
    shared_->handler = std::move(handler);
    shared_->pool =
        std::make_unique<http_internal::WorkerPool>(shared_->options.workers);
  }
  ~Impl() {
    Stop();
    // Without a running Run, the connections' ends are carried out here, so
    // that every handler sees its client gone and returns before the sockets
    // go.
    if (!running_) {
      io_.restart();
      io_.poll();
    }
    shared_->pool.reset();
  }

  absl::Status LoadTls() {
    const HttpServerOptions& o = shared_->options;
    if (o.tls_cert.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(tls_,
                     http_internal::ServerTlsContext(o.tls_cert, o.tls_key));
    return absl::OkStatus();
  }

  absl::StatusOr<int> Bind() {
    const HttpServerOptions& o = shared_->options;
    error_code ec;
    const net::ip::address address = net::ip::make_address(o.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host '", o.host, "' is not an IP address"));
    }
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      error_code ignored;
      acceptor_.close(ignored);
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", o.host, ":", o.port, ": ", ec.message()));
    }
    return static_cast<int>(acceptor_.local_endpoint().port());
  }

  void Run() {
    running_ = true;
    Accept();
    io_.run();
    running_ = false;
  }

  void BeginShutdown() {
    shared_->draining = true;
    net::post(io_, [this] {
      error_code ec;
      acceptor_.close(ec);
    });
    ForEachConnection([](Connection& c) { c.Drain(); });
  }

  void Stop() {
    shared_->draining = true;
    net::post(io_, [this] {
      error_code ec;
      acceptor_.close(ec);
      accept_retry_.reset();
    });
    ForEachConnection([](Connection& c) { c.Die(true); });
  }

  int64_t ActiveExchanges() const { return shared_->active_exchanges; }

  HttpServerStats Stats() const {
    HttpServerStats s;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      s.open_connections = static_cast<int64_t>(shared_->open.size());
    }
    s.accepted = shared_->accepted;
    s.refused_header = shared_->refused_header;
    s.refused_body = shared_->refused_body;
    s.timed_out = shared_->timed_out;
    s.over_capacity = shared_->over_capacity;
    s.clients_gone = shared_->clients_gone;
    return s;
  }

 private:
  // Runs `f` on each open connection's strand.
  void ForEachConnection(std::function<void(Connection&)> f) {
    std::vector<std::shared_ptr<Connection>> open;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      for (auto& [id, weak] : shared_->open) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (auto& c : open) c->Post([c, f] { f(*c); });
  }

  void Accept() {
    acceptor_.async_accept(
        net::make_strand(io_), [this](error_code ec, tcp::socket socket) {
          if (!acceptor_.is_open()) return;
          if (ec) {
            // Out of descriptors or memory: try again shortly rather than spin.
            accept_retry_ = std::make_unique<net::steady_timer>(
                io_, std::chrono::milliseconds(50));
            accept_retry_->async_wait([this](error_code e) {
              if (!e && acceptor_.is_open()) Accept();
            });
            return;
          }
          OnAccept(std::move(socket));
          Accept();
        });
  }

  void OnAccept(tcp::socket socket) {
    ++shared_->accepted;
    const HttpServerOptions& o = shared_->options;
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (static_cast<int64_t>(shared_->open.size()) >=
          o.limits.max_connections) {
        ++shared_->over_capacity;
        if (o.on_refusal) o.on_refusal(503);
        if (!tls_) {
          // Best effort, never blocking: the socket's buffer takes it.
          const std::string bytes = shared_->RefusalBytes(
              503, absl::StrCat("the server has ", o.limits.max_connections,
                                " connections open; try again"));
          [[maybe_unused]] ssize_t n =
              ::send(socket.native_handle(), bytes.data(), bytes.size(),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        error_code ec;
        socket.close(ec);
        return;
      }
      id = ++shared_->next_id;
    }
    error_code ec;
    socket.set_option(tcp::no_delay(true),
                      ec);  // server-sent events go out at once
    auto transport = tls_
                         ? http_internal::TlsTransport(std::move(socket), *tls_)
                         : http_internal::PlainTransport(std::move(socket));
    auto connection =
        std::make_shared<Connection>(shared_, std::move(transport), id);
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->open[id] = connection;
    }
    connection->Post([connection] { connection->Start(); });
  }

  net::io_context io_;
  std::atomic<bool> running_{false};
  std::shared_ptr<ServerShared> shared_;
  std::unique_ptr<net::ssl::context> tls_;
  tcp::acceptor acceptor_;
  std::unique_ptr<net::steady_timer> accept_retry_;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(
    HttpServerOptions options, Handler handler) {
  RETURN_IF_ERROR(options.limits.Validate());
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the port must be in [0, 65535], got ", options.port));
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "HTTPS needs both a certificate and a key");
  }
  if (options.workers < 1)
    return absl::InvalidArgumentError("workers must be >= 1");
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  RETURN_IF_ERROR(impl->LoadTls());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

absl::StatusOr<int> HttpServer::Bind() { return impl_->Bind(); }
void HttpServer::Run() { impl_->Run(); }
void HttpServer::BeginShutdown() { impl_->BeginShutdown(); }
int64_t HttpServer::ActiveExchanges() const { return impl_->ActiveExchanges(); }
void HttpServer::Stop() { impl_->Stop(); }
HttpServerStats HttpServer::Stats() const { return impl_->Stats(); }

}  // namespace lrkv
