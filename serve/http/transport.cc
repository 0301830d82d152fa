#include "serve/http/transport.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "base/tls_pair.h"

namespace lrkv::http_internal {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;
using net::ip::tcp;

class Plain final : public Transport {
 public:
  explicit Plain(tcp::socket socket) : socket_(std::move(socket)) {}
  void AsyncHandshake(std::function<void(error_code)> done) override {
    done({});
  }
  void AsyncReadSome(net::mutable_buffer buffer, IoHandler done) override {
    socket_.async_read_some(buffer, std::move(done));
  }
  void AsyncWrite(net::const_buffer buffer, IoHandler done) override {
    net::async_write(socket_, buffer, std::move(done));
  }
  void ShutdownSend() override {
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
  }
  tcp::socket& socket() override { return socket_; }
  bool tls() const override { return false; }

 private:
  tcp::socket socket_;
};

class Tls final : public Transport {
 public:
  Tls(tcp::socket socket, ssl::context& context)
      : stream_(std::move(socket), context) {}
  void AsyncHandshake(std::function<void(error_code)> done) override {
    stream_.async_handshake(ssl::stream_base::server, std::move(done));
  }
  void AsyncReadSome(net::mutable_buffer buffer, IoHandler done) override {
    stream_.async_read_some(buffer, std::move(done));
  }
  void AsyncWrite(net::const_buffer buffer, IoHandler done) override {
    net::async_write(stream_, buffer, std::move(done));
  }
  void ShutdownSend() override {
    // close_notify without waiting for the peer's (the lingering read drains
    // it), then FIN.
    SSL_shutdown(stream_.native_handle());
    error_code ec;
    stream_.next_layer().shutdown(tcp::socket::shutdown_send, ec);
  }
  tcp::socket& socket() override { return stream_.next_layer(); }
  bool tls() const override { return true; }

 private:
  ssl::stream<tcp::socket> stream_;
};

}  // namespace

void Transport::Close() {
  error_code ec;
  socket().close(ec);
}

bool IsPeerEof(const error_code& ec) {
  return ec == net::error::eof || ec == ssl::error::stream_truncated;
}

std::unique_ptr<Transport> PlainTransport(tcp::socket socket) {
  return std::make_unique<Plain>(std::move(socket));
}

std::unique_ptr<Transport> TlsTransport(tcp::socket socket,
                                        ssl::context& context) {
  return std::make_unique<Tls>(std::move(socket), context);
}

absl::StatusOr<std::unique_ptr<ssl::context>> ServerTlsContext(
    const std::string& cert, const std::string& key) {
  if (absl::Status s = CheckTlsPair(cert, key); !s.ok()) return s;
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds |
                       ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  boost::system::error_code ec;
  context->use_certificate_chain_file(cert, ec);
  if (!ec) context->use_private_key_file(key, ssl::context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TLS pair ", cert, ", ", key, " does not load: ", ec.message()));
  }
  return context;
}

}  // namespace lrkv::http_internal
