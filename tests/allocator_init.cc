// Linked into every test binary: the allocator settings lrkv's programs start
// with (base/allocator.h), so that tests run the code as the programs do.
#include "base/allocator.h"

namespace {
const bool kAllocatorConfigured = (lrkv::ConfigureAllocator(), true);
}  // namespace
