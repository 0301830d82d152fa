// A fixed set of threads running tasks in arrival order: the HTTP server's
// handlers, which block for the length of a response.
#ifndef LRKV_SERVE_HTTP_WORKER_POOL_H_
#define LRKV_SERVE_HTTP_WORKER_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lrkv::http_internal {

class WorkerPool {
 public:
  explicit WorkerPool(int64_t threads);
  // Tasks not yet started are dropped; running ones are joined.
  ~WorkerPool();

  void Submit(std::function<void()> task);

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lrkv::http_internal

#endif  // LRKV_SERVE_HTTP_WORKER_POOL_H_
