// The byte stream under one HTTP connection: a TCP socket, or TLS over one
// (Asio's OpenSSL stream). The connection (http_connection.h) speaks HTTP over
// either through this interface; every call is made on the connection's strand.
#ifndef LRKV_SERVE_HTTP_TRANSPORT_H_
#define LRKV_SERVE_HTTP_TRANSPORT_H_

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace lrkv::http_internal {

using IoHandler = std::function<void(boost::system::error_code, size_t)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // The TLS handshake (nothing for plain TCP).
  virtual void AsyncHandshake(
      std::function<void(boost::system::error_code)> done) = 0;
  virtual void AsyncReadSome(boost::asio::mutable_buffer buffer,
                             IoHandler done) = 0;
  virtual void AsyncWrite(boost::asio::const_buffer buffer, IoHandler done) = 0;
  // Ends our sending side (TCP FIN; for TLS, close_notify first), keeping the
  // receiving side open so that a lingering close can drain what the client
  // still sends.
  virtual void ShutdownSend() = 0;
  // Closes the socket; pending operations complete with operation_aborted.
  void Close();
  // The TCP socket under it (its descriptor for poll, the peer's address).
  virtual boost::asio::ip::tcp::socket& socket() = 0;
  virtual bool tls() const = 0;
};

// Whether `ec` on a read means the peer ended its sending side (FIN, or TLS
// close_notify or a TLS stream cut without one), rather than a failure.
bool IsPeerEof(const boost::system::error_code& ec);

std::unique_ptr<Transport> PlainTransport(boost::asio::ip::tcp::socket socket);
std::unique_ptr<Transport> TlsTransport(boost::asio::ip::tcp::socket socket,
                                        boost::asio::ssl::context& context);

// A server context for `cert` (PEM chain) and `key` (PEM), each checked on its
// own and against the other: the message names the file that failed and why
// (OpenSSL's reason), or that the key does not belong to the certificate.
absl::StatusOr<std::unique_ptr<boost::asio::ssl::context>> ServerTlsContext(
    const std::string& cert, const std::string& key);

}  // namespace lrkv::http_internal

#endif  // LRKV_SERVE_HTTP_TRANSPORT_H_
