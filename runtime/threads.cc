// Thread settings for LibTorch's intra-op pool (see threads.h).
#include "runtime/threads.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <thread>

namespace lrkv {

int ConfigureThreads(int requested) {
  int n = requested;
  if (n <= 0) {
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && *env != 0) {
      n = std::atoi(env);
    }
  }
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n > 0) at::set_num_threads(n);
  return at::get_num_threads();
}

int ThreadCount() { return at::get_num_threads(); }

}  // namespace lrkv
