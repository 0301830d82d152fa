// libFuzzer target: the bytes a client sends `lrkv serve`, as they arrive on a
// socket. Each input is written to a fresh connection to an in-process
// HttpServer (serve/http/) with lrkv serve's limits, whose handler parses the
// OpenAI request bodies (serve/openai_request.h) and answers with the error
// mapping (serve/http_errors.h): malformed request lines and headers, huge or
// many headers, chunked and compressed bodies, pipelined requests, invalid
// UTF-8 and deep JSON must get an answer or a closed connection, never a crash.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "serve/http/http_server.h"
#include "serve/http_errors.h"
#include "serve/openai_request.h"

namespace {

void Answer(const absl::Status& status, lrkv::HttpExchange& ex) {
  ex.Respond({lrkv::HttpStatusOf(status), "application/json", {}},
             status.ok() ? "{}" : lrkv::OpenAiErrorBody(status));
}

// The server, started once and kept for the process (reachable, not a leak).
lrkv::HttpServer* g_server = nullptr;

int ServerPort() {
  static const int port = [] {
    lrkv::HttpServerOptions o;
    o.port = 0;
    o.workers = 4;
    o.limits.max_body_bytes = size_t{1} << 20;
    o.limits.request_timeout = std::chrono::milliseconds(200);
    o.limits.idle_timeout = std::chrono::milliseconds(200);
    o.error_body = [](int status, const std::string& message) {
      return lrkv::OpenAiErrorBody(status, message);
    };
    auto server = lrkv::HttpServer::Create(o, [](lrkv::HttpExchange& ex) {
      const lrkv::HttpRequest& req = ex.request();
      if (req.path == "/v1/completions") {
        Answer(lrkv::ParseCompletionRequest(req.body).status(), ex);
      } else if (req.path == "/v1/chat/completions") {
        Answer(lrkv::ParseChatRequest(req.body).status(), ex);
      } else {
        ex.Respond({200, "application/json", {}}, "{}");
      }
    });
    if (!server.ok()) abort();
    g_server = server->release();
    auto bound = g_server->Bind();
    if (!bound.ok()) abort();
    std::thread([] { g_server->Run(); }).detach();
    return *bound;
  }();
  return port;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(ServerPort()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    for (size_t sent = 0; sent < size;) {
      const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
  }
  close(fd);
  return 0;
}
