// The HTTP layer of `lrkv serve` (serve/http/) under attack, on loopback, with
// raw sockets: each row of docs/reliability.md's HTTP table. Decompression
// bombs, bodies over the limit however framed, header floods, slow clients, a
// connection flood, pipelining, half-closes, clients that leave. Body and
// header attacks are held to the server growing by less than 64 MiB. This file
// builds without LibTorch, so the sanitizer run (scope `formats`) takes it too.
#include <brotli/encode.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "serve/http/http_server.h"
#include "serve/http_errors.h"
#include "tests/serve/http_test_client.h"
#include "tests/serve/server_thread.h"

namespace lrkv {
namespace {

using std::chrono::milliseconds;
using testing::BindAndRun;
using testing::ParseResponses;
using testing::RawConnection;
using testing::Statuses;
constexpr int64_t kMiB = 1 << 20;
// The most the server may grow by under one body or header attack.
constexpr int64_t kRssBound = 64 * kMiB;

// An HttpServer on a free port with a few test routes:
//   GET /health; POST /echo (answers the body's size);
//   GET /stream (five chunks); GET /wait?ms=N (answers after N ms unless the
//   client leaves first, which it counts).
class EdgeServer {
 public:
  explicit EdgeServer(HttpLimits limits = TestLimits(), int64_t workers = 16) {
    HttpServerOptions o;
    o.port = 0;
    o.limits = limits;
    o.workers = workers;
    o.error_body = [](int status, const std::string& m) {
      return OpenAiErrorBody(status, m);
    };
    o.error_content_type = "application/json";
    auto s = HttpServer::Create(o, [this](HttpExchange& ex) { Handle(ex); });
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return;
    server_ = std::move(*s);
    port_ = BindAndRun(*server_, &thread_);
  }
  ~EdgeServer() {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  static HttpLimits TestLimits() {
    HttpLimits l;
    l.request_timeout = milliseconds(2000);
    l.idle_timeout = milliseconds(5000);
    l.write_timeout = milliseconds(5000);
    l.max_connections = 200;
    return l;
  }
  int port() const { return port_; }
  HttpServer& server() { return *server_; }
  int64_t clients_gone() const { return gone_; }
  int64_t waits_finished() const { return waits_finished_; }

 private:
  void Handle(HttpExchange& ex) {
    const HttpRequest& r = ex.request();
    if (r.path == "/health")
      return ex.Respond({200, "application/json", {}}, R"({"status":"ok"})");
    if (r.path == "/echo")
      return ex.Respond({200, "text/plain", {}}, absl::StrCat(r.body.size()));
    if (r.path == "/stream") {
      ex.BeginStream({200, "text/event-stream", {}}, ": ping\n\n");
      for (int i = 0; i < 5; ++i) {
        if (!ex.Write(absl::StrCat("data: ", i, "\n\n"))) return;
        std::this_thread::sleep_for(milliseconds(20));
      }
      return ex.EndStream();
    }
    if (r.path == "/wait") {
      int ms = 0;
      (void)absl::SimpleAtoi(r.target.substr(r.target.find('=') + 1), &ms);
      auto gone = std::make_shared<std::atomic<bool>>(false);
      ex.OnClientGone([gone, this] {
        *gone = true;
        ++gone_;
      });
      const auto end = std::chrono::steady_clock::now() + milliseconds(ms);
      while (!*gone && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(milliseconds(2));
      }
      if (*gone) return;
      ++waits_finished_;
      return ex.Respond({200, "text/plain", {}}, "waited");
    }
    ex.Respond({404, "text/plain", {}}, "no route");
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int64_t> gone_{0}, waits_finished_{0};
};

// 256 MiB of zeros, gzip-compressed (about 255 KiB).
std::string GzipBomb() {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 16 + 15, 9, Z_DEFAULT_STRATEGY);
  std::string zeros(kMiB, '\0'), out;
  std::vector<unsigned char> buf(1 << 16);
  for (int i = 0; i < 256; ++i) {
    z.next_in = reinterpret_cast<Bytef*>(zeros.data());
    z.avail_in = static_cast<uInt>(zeros.size());
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, i == 255 ? Z_FINISH : Z_NO_FLUSH);
      out.append(reinterpret_cast<char*>(buf.data()), buf.size() - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return out;
}

// 256 MiB of zeros, brotli-compressed (a few hundred bytes).
std::string BrotliBomb() {
  const std::string zeros(256 * kMiB, '\0');
  std::string out(BrotliEncoderMaxCompressedSize(zeros.size()), '\0');
  size_t size = out.size();
  BrotliEncoderCompress(5, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC,
                        zeros.size(),
                        reinterpret_cast<const uint8_t*>(zeros.data()), &size,
                        reinterpret_cast<uint8_t*>(out.data()));
  out.resize(size);
  return out;
}

std::string Post(const std::string& target, const std::string& extra_headers,
                 const std::string& body) {
  return absl::StrCat("POST ", target, " HTTP/1.1\r\nHost: t\r\n",
                      extra_headers, "Content-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// The one response a request on a fresh connection gets (its status; 0: none).
int StatusOf(int port, const std::string& bytes) {
  RawConnection c(port);
  c.Send(bytes);
  const std::vector<int> s = Statuses(
      c.ReadUntil([](const std::string& got) { return !Statuses(got).empty(); },
                  milliseconds(10000)));
  return s.empty() ? 0 : s[0];
}

TEST(HttpEdge, CompressedBodiesAreRefusedUnreadWithoutGrowth) {
  const std::string gzip = GzipBomb(), br = BrotliBomb();
  std::cout << "gzip bomb " << gzip.size() << " B, brotli bomb " << br.size()
            << " B (each 256 MiB inflated)\n";
  EdgeServer server;
  for (const auto& [encoding, body] :
       {std::pair{"gzip", gzip}, std::pair{"br", br}}) {
    testing::ResetPeakRss();
    const int64_t before = testing::RssBytes();
    RawConnection c(server.port());
    c.Send(Post("/echo", absl::StrCat("Content-Encoding: ", encoding, "\r\n"),
                body));
    const auto responses = ParseResponses(c.ReadAll(milliseconds(5000)));
    ASSERT_EQ(responses.size(), 1u) << encoding;
    EXPECT_EQ(responses[0].status, 415) << encoding;
    EXPECT_NE(responses[0].body.find("Content-Encoding"), std::string::npos);
    const int64_t growth = testing::PeakRssBytes() - before;
    std::cout << encoding << ": 415, peak RSS growth " << growth / 1024
              << " KiB\n";
    EXPECT_LT(growth, kRssBound) << encoding;
  }
  // "identity" is no encoding: accepted.
  EXPECT_EQ(StatusOf(server.port(),
                     Post("/echo", "Content-Encoding: identity\r\n", "{}")),
            200);
}

TEST(HttpEdge, BodiesOverTheLimitAreRefusedHoweverFramed) {
  EdgeServer server;
  // Content-Length over the limit: refused on the header, before any body.
  EXPECT_EQ(
      StatusOf(server.port(),
               "POST /echo HTTP/1.1\r\nContent-Length: 209715200\r\n\r\n{"),
      413);
  // 200 MiB chunked: counted as it arrives, refused at the limit.
  testing::ResetPeakRss();
  const int64_t before = testing::RssBytes();
  RawConnection c(server.port());
  c.Send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string piece = absl::StrCat(absl::Hex(64 << 10), "\r\n",
                                         std::string(64 << 10, 'x'), "\r\n");
  int64_t sent = 0;
  while (sent < 200 * kMiB && c.Send(piece)) sent += 64 << 10;
  const std::vector<int> chunked = Statuses(c.ReadAll(milliseconds(5000)));
  const int64_t growth = testing::PeakRssBytes() - before;
  std::cout << "chunked: sent " << sent / kMiB
            << " MiB before the server closed; statuses "
            << (chunked.empty() ? 0 : chunked[0]) << ", peak RSS growth "
            << growth / 1024 << " KiB\n";
  ASSERT_FALSE(chunked.empty());
  EXPECT_EQ(chunked[0], 413);
  EXPECT_LT(sent, 200 * kMiB);  // the server stopped taking it
  EXPECT_LT(growth, kRssBound);
  // A body with neither Content-Length nor chunked framing: 411.
  EXPECT_EQ(StatusOf(server.port(),
                     "POST /echo HTTP/1.1\r\n\r\n" + std::string(4096, 'x')),
            411);
  // Under the limit, both framings are read whole.
  EXPECT_EQ(StatusOf(server.port(), Post("/echo", "", std::string(1000, 'x'))),
            200);
  EXPECT_EQ(StatusOf(server.port(),
                     "POST /echo HTTP/1.1\r\nTransfer-Encoding: "
                     "chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
            200);
  // A transfer coding other than chunked: 501.
  EXPECT_EQ(StatusOf(server.port(),
                     "POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, "
                     "chunked\r\n\r\n0\r\n\r\n"),
            501);
}

TEST(HttpEdge, HeaderFloodsAre431OnParallelConnectionsWithoutGrowth) {
  EdgeServer server;
  testing::ResetPeakRss();
  const int64_t before = testing::RssBytes();
  std::string many = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&many, "X-", i, ": v\r\n");
  many += "\r\n";
  const std::string line(kMiB, 'a');
  std::vector<std::thread> attackers;
  std::vector<int> status(8, 0);
  for (int k = 0; k < 8; ++k) {
    attackers.emplace_back([&, k] {
      RawConnection c(server.port());
      if (k % 2 == 0) {
        c.Send(many);  // 100,000 header fields (1.2 MB)
      } else {
        // A 101 MiB header section, sent until the server stops taking it.
        c.Send("GET /health HTTP/1.1\r\nX-Big: ");
        for (int i = 0; i < 101 && c.Send(line); ++i) {
        }
      }
      const std::vector<int> s = Statuses(c.ReadAll(milliseconds(5000)));
      status[k] = s.empty() ? 0 : s[0];
    });
  }
  for (auto& t : attackers) t.join();
  const int64_t growth = testing::PeakRssBytes() - before;
  std::cout << "8 header floods at once: peak RSS growth " << growth / 1024
            << " KiB\n";
  for (int k = 0; k < 8; ++k) EXPECT_EQ(status[k], 431) << k;
  EXPECT_LT(growth, kRssBound);
  // Under the byte limit but over the field count: 431 too.
  std::string fields = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) absl::StrAppend(&fields, "X-", i, ": v\r\n");
  EXPECT_EQ(StatusOf(server.port(), fields + "\r\n"), 431);
  // A long request line counts against the same limit.
  EXPECT_EQ(
      StatusOf(server.port(), absl::StrCat("GET /", std::string(20000, 'a'),
                                           " HTTP/1.1\r\n\r\n")),
      431);
  EXPECT_EQ(server.server().Stats().refused_header, 10);
  EXPECT_EQ(StatusOf(server.port(), "GET /health HTTP/1.1\r\n\r\n"), 200);
}

TEST(HttpEdge, SlowClientsNeitherStarveOthersNorStayPastTheRequestDeadline) {
  EdgeServer server;
  constexpr int kSlow = 100;
  std::atomic<bool> stop{false};
  std::vector<int> slow_status(kSlow, 0);
  std::vector<std::thread> slow;
  for (int k = 0; k < kSlow; ++k) {
    slow.emplace_back([&, k] {
      RawConnection c(server.port());
      c.Send("GET /health HTTP/1.1\r\n");
      // One header line every 300 ms, never done, until the server answers.
      auto answered = [](const std::string& got) {
        return !Statuses(got).empty();
      };
      std::string got;
      for (int i = 0; i < 30 && !stop && got.empty(); ++i) {
        if (!c.Send(absl::StrCat("X-", i, ": v\r\n"))) break;
        got = c.ReadUntil(answered, milliseconds(300));
      }
      if (got.empty()) got = c.ReadUntil(answered, milliseconds(3000));
      const std::vector<int> s = Statuses(got);
      slow_status[k] = s.empty() ? 0 : s[0];
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(StatusOf(server.port(), "GET /health HTTP/1.1\r\n\r\n"), 200);
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::sort(ms.begin(), ms.end());
  const double p99 = ms[ms.size() * 99 / 100];
  std::cout << "/health during " << kSlow << " slow connections: p50 "
            << ms[ms.size() / 2] << " ms, p99 " << p99 << " ms; open "
            << server.server().Stats().open_connections << "\n";
  EXPECT_LT(p99, 100.0);
  for (auto& t : slow) t.join();
  stop = true;
  for (int k = 0; k < kSlow; ++k) EXPECT_EQ(slow_status[k], 408) << k;
  EXPECT_EQ(server.server().Stats().timed_out, kSlow);
}

TEST(HttpEdge, ConnectionsBeyondTheCapAre503) {
  HttpLimits limits = EdgeServer::TestLimits();
  limits.max_connections = 4;
  EdgeServer server(limits);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConnection>(server.port()));
    held.back()->Send("GET /health HTTP/1.1\r\n\r\n");
    ASSERT_EQ(Statuses(held.back()->ReadUntil(
                  [](const std::string& got) { return !Statuses(got).empty(); },
                  milliseconds(5000))),
              std::vector<int>{200});
  }
  EXPECT_EQ(StatusOf(server.port(), "GET /health HTTP/1.1\r\n\r\n"), 503);
  EXPECT_EQ(server.server().Stats().over_capacity, 1);
  held.clear();
  for (int i = 0; i < 200 && server.server().Stats().open_connections > 0;
       ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(StatusOf(server.port(), "GET /health HTTP/1.1\r\n\r\n"), 200);
}

TEST(HttpEdge, PipelinedAndHalfClosedRequestsAreAnswered) {
  EdgeServer server;
  RawConnection pipelined(server.port());
  pipelined.Send(absl::StrCat("GET /health HTTP/1.1\r\n\r\n",
                              Post("/echo", "", "12345"),
                              "GET /stream HTTP/1.1\r\n\r\n"));
  const auto three = ParseResponses(pipelined.ReadUntil(
      [](const std::string& got) { return ParseResponses(got).size() >= 3; },
      milliseconds(5000)));
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].body, R"({"status":"ok"})");
  EXPECT_EQ(three[1].body, "5");
  EXPECT_EQ(three[2].body,
            "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");

  // A request, then the client's FIN: answered (after an interim 100, which
  // the server sends to tell a half-close from a client gone), then closed.
  for (const std::string request :
       {Post("/echo", "", "abc"),
        std::string("GET /wait?ms=300 HTTP/1.1\r\n\r\n")}) {
    RawConnection half(server.port());
    half.Send(request);
    half.HalfClose();
    const std::vector<int> s = Statuses(half.ReadAll(milliseconds(5000)));
    EXPECT_EQ(s, std::vector<int>{200}) << request;
  }
  EXPECT_EQ(server.waits_finished(), 1);
  EXPECT_EQ(server.clients_gone(), 0);
}

TEST(HttpEdge, AClientThatLeavesIsNoticedWhileItsRequestIsHandled) {
  EdgeServer server;
  for (int i = 0; i < 3; ++i) {
    RawConnection c(server.port());
    c.Send("GET /wait?ms=20000 HTTP/1.1\r\n\r\n");
    std::this_thread::sleep_for(milliseconds(100));
    const auto t0 = std::chrono::steady_clock::now();
    c.Close();
    while (server.clients_gone() == i &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    std::cout << "a client gone noticed after " << ms << " ms\n";
    EXPECT_EQ(server.clients_gone(), i + 1);
  }
  EXPECT_EQ(server.waits_finished(), 0);
  EXPECT_EQ(server.server().Stats().clients_gone, 3);
}

TEST(HttpEdge, DeadlinesAndMalformedRequests) {
  EdgeServer server;
  // A request begun and never finished: 408 at the request deadline.
  EXPECT_EQ(StatusOf(server.port(),
                     "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"),
            408);
  // Expect: 100-continue gets its interim response, then the answer.
  RawConnection expect(server.port());
  expect.Send(
      "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: "
      "3\r\n\r\n");
  const auto interim = ParseResponses(expect.ReadUntil(
      [](const std::string& got) { return !ParseResponses(got).empty(); },
      milliseconds(5000)));
  ASSERT_EQ(interim.size(), 1u);
  EXPECT_EQ(interim[0].status, 100);
  expect.Send("abc");
  EXPECT_EQ(Statuses(expect.ReadUntil(
                [](const std::string& got) { return !Statuses(got).empty(); },
                milliseconds(5000))),
            std::vector<int>{200});
  // Garbage: 400 with the API's error body.
  RawConnection garbage(server.port());
  garbage.Send("\x01\x02 not http\r\n\r\n");
  const auto bad = ParseResponses(garbage.ReadAll(milliseconds(5000)));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].status, 400);
  EXPECT_NE(bad[0].body.find("\"error\""), std::string::npos) << bad[0].body;
  // HTTP/1.0 without keep-alive: answered, then closed.
  RawConnection old(server.port());
  old.Send("GET /health HTTP/1.0\r\n\r\n");
  EXPECT_EQ(Statuses(old.ReadAll(milliseconds(5000))), std::vector<int>{200});
}

TEST(HttpEdge, ShutdownRefusesNewRequestsAndLetsExchangesFinish) {
  EdgeServer server;
  RawConnection busy(server.port());
  busy.Send("GET /wait?ms=500 HTTP/1.1\r\n\r\n");
  RawConnection idle(server.port());
  idle.Send("GET /health HTTP/1.1\r\n\r\n");
  ASSERT_EQ(Statuses(idle.ReadUntil(
                [](const std::string& got) { return !Statuses(got).empty(); },
                milliseconds(5000))),
            std::vector<int>{200});
  std::this_thread::sleep_for(milliseconds(50));
  server.server().BeginShutdown();
  EXPECT_EQ(Statuses(busy.ReadAll(milliseconds(5000))), std::vector<int>{200});
  // The kept-alive idle connection was closed; a new one is not accepted.
  EXPECT_EQ(idle.ReadAll(milliseconds(2000)), "");
  EXPECT_EQ(server.server().ActiveExchanges(), 0);
}

}  // namespace
}  // namespace lrkv
