// Facts about the current device and the kernels' launch shapes that the
// decode entry points need on every call (SM count, shared-memory limits,
// resident blocks per SM). Each is asked of the CUDA runtime once per device
// and kept for the process: a decode step at short context takes tens of
// microseconds, and the occupancy query and attribute calls were part of it.
#ifndef LRKV_KERNELS_CUDA_DEVICE_FACTS_CUH_
#define LRKV_KERNELS_CUDA_DEVICE_FACTS_CUH_

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace lrkv::kernels::cuda {

// An attribute of the current device, or `fallback` where it cannot be read.
int DeviceAttribute(cudaDeviceAttr attr, int fallback);

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current
// device (cudaFuncAttributeMaxDynamicSharedMemorySize), raising the limit
// only when a call needs more than any before it.
absl::Status AllowSharedMemory(const void* kernel, int bytes);

// Blocks of `threads` threads and `bytes` of dynamic shared memory that fit on
// one SM of the current device at once (at least 1). The limit must have been
// allowed first.
int ResidentBlocks(const void* kernel, int threads, int bytes);

}  // namespace lrkv::kernels::cuda

#endif  // LRKV_KERNELS_CUDA_DEVICE_FACTS_CUH_
