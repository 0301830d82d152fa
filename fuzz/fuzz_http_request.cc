// libFuzzer target: the bytes a client sends `lrkv serve`, as they arrive on a
// socket. Each input is written to a fresh connection to an in-process
// cpp-httplib server with lrkv serve's settings (body limit, timeouts) whose
// routes parse the OpenAI request bodies (serve/openai_request.h) and answer
// with the error mapping (serve/http_errors.h): malformed request lines and
// headers, huge headers, invalid UTF-8 and deep JSON must get an answer or a
// closed connection, never a crash.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <thread>

#include "serve/http_errors.h"
#include "serve/openai_request.h"

namespace {

void Answer(const absl::Status& status, httplib::Response& res) {
  res.status = lrkv::HttpStatusOf(status);
  if (!status.ok())
    res.set_content(lrkv::OpenAiErrorBody(status), "application/json");
}

// The server, started once and kept for the process (reachable, not a leak).
httplib::Server* g_server = nullptr;

int ServerPort() {
  static const int port = [] {
    g_server = new httplib::Server();
    httplib::Server* server = g_server;
    server->set_payload_max_length(size_t{1} << 20);
    server->set_read_timeout(0, 200000);
    server->Post("/v1/completions",
                 [](const httplib::Request& req, httplib::Response& res) {
                   Answer(lrkv::ParseCompletionRequest(req.body).status(), res);
                 });
    server->Post("/v1/chat/completions",
                 [](const httplib::Request& req, httplib::Response& res) {
                   Answer(lrkv::ParseChatRequest(req.body).status(), res);
                 });
    server->Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{}", "application/json");
    });
    const int bound = server->bind_to_any_port("127.0.0.1");
    std::thread([server] { server->listen_after_bind(); }).detach();
    return bound;
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
