// Raw sockets for the HTTP edge tests: bytes exactly as an attacker would send
// them (no client library between), responses read back whole, and the
// process's resident memory.
#ifndef LRKV_TESTS_SERVE_HTTP_TEST_CLIENT_H_
#define LRKV_TESTS_SERVE_HTTP_TEST_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace lrkv::testing {

// A connected TCP socket to 127.0.0.1:port, closed on destruction.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Sends every byte; false once the server closed or reset the connection.
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void HalfClose() { ::shutdown(fd_, SHUT_WR); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Reads until the server closes, `stop(received)` holds, or `timeout`.
  template <class Stop>
  std::string ReadUntil(Stop stop, std::chrono::milliseconds timeout) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + timeout;
    char buf[16384];
    while (!stop(out)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  std::string ReadAll(std::chrono::milliseconds timeout) {
    return ReadUntil([](const std::string&) { return false; }, timeout);
  }

 private:
  int fd_ = -1;
};

struct RawResponse {
  int status = 0;
  std::string head;  // status line and fields
  std::string body;  // de-chunked
};

// The responses in `bytes`, in order, 1xx interim ones included; a response
// cut short ends the list.
inline std::vector<RawResponse> ParseResponses(const std::string& bytes) {
  std::vector<RawResponse> out;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t head_end = bytes.find("\r\n\r\n", at);
    if (head_end == std::string::npos || bytes.compare(at, 7, "HTTP/1.") != 0)
      break;
    RawResponse r;
    r.head = bytes.substr(at, head_end - at);
    r.status = std::atoi(r.head.c_str() + 9);
    at = head_end + 4;
    std::string lower = r.head;
    for (char& c : lower)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (r.status < 200) {
      out.push_back(r);
      continue;
    }
    if (lower.find("transfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        const size_t line_end = bytes.find("\r\n", at);
        if (line_end == std::string::npos) return out;
        const size_t n =
            std::stoul(bytes.substr(at, line_end - at), nullptr, 16);
        at = line_end + 2;
        if (n == 0) {
          at += 2;
          break;
        }
        if (at + n + 2 > bytes.size()) return out;
        r.body += bytes.substr(at, n);
        at += n + 2;
      }
    } else {
      const size_t cl = lower.find("content-length: ");
      const size_t n =
          cl == std::string::npos ? 0 : std::stoul(lower.substr(cl + 16));
      if (at + n > bytes.size()) return out;
      r.body = bytes.substr(at, n);
      at += n;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The final (non-1xx) responses' status codes in `bytes`, in order.
inline std::vector<int> Statuses(const std::string& bytes) {
  std::vector<int> out;
  for (const RawResponse& r : ParseResponses(bytes)) {
    if (r.status >= 200) out.push_back(r.status);
  }
  return out;
}

// The process's resident bytes now, and its peak since ResetPeakRss.
inline int64_t StatusField(const char* name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0)
      return std::stoll(line.substr(std::string(name).size())) * 1024;
  }
  return -1;
}
inline int64_t RssBytes() { return StatusField("VmRSS:"); }
inline int64_t PeakRssBytes() { return StatusField("VmHWM:"); }
inline void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_SERVE_HTTP_TEST_CLIENT_H_
