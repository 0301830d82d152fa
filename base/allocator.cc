#include "base/allocator.h"

#include <malloc.h>

namespace lrkv {

void ConfigureAllocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace lrkv
