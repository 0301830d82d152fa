// A server under test on a free loopback port, run on a thread of its own:
// what RunningServer (`lrkv serve`) and the HTTP edge's EdgeServer share.
#ifndef LRKV_TESTS_SERVE_SERVER_THREAD_H_
#define LRKV_TESTS_SERVE_SERVER_THREAD_H_

#include <gtest/gtest.h>

#include <thread>

namespace lrkv::testing {

// Binds `server` (port 0 in its options: the kernel picks one) and starts its
// Run loop on `thread`. Returns the port, or 0 with a test failure recorded and
// no thread started when it cannot bind.
template <typename Server>
int BindAndRun(Server& server, std::thread* thread) {
  auto port = server.Bind();
  EXPECT_TRUE(port.ok()) << port.status();
  if (!port.ok()) return 0;
  *thread = std::thread([&server] { server.Run(); });
  return *port;
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_SERVE_SERVER_THREAD_H_
