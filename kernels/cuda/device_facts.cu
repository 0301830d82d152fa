// Per-device caches behind device_facts.cuh. Keys include the device, so a
// process that switches devices asks again; a mutex guards the maps (engines
// may decode from several threads).
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_facts.cuh"

namespace lrkv::kernels::cuda {
namespace {

struct Facts {
  std::mutex mu;
  std::map<std::pair<int, int>, int> attributes;      // (device, attribute)
  std::map<std::pair<int, const void*>, int> shared;  // allowed bytes
  std::map<std::tuple<int, const void*, int, int>, int> resident;
};

Facts& TheFacts() {
  static Facts* facts = new Facts;
  return *facts;
}

int CurrentDevice() {
  int device = -1;
  return cudaGetDevice(&device) == cudaSuccess ? device : -1;
}

}  // namespace

int DeviceAttribute(cudaDeviceAttr attr, int fallback) {
  const int device = CurrentDevice();
  if (device < 0) return fallback;
  Facts& f = TheFacts();
  std::lock_guard<std::mutex> lock(f.mu);
  const auto key = std::make_pair(device, static_cast<int>(attr));
  if (auto it = f.attributes.find(key); it != f.attributes.end()) {
    return it->second;
  }
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    (void)cudaGetLastError();  // not the next launch's error
    return fallback;           // not kept: a later call may succeed
  }
  f.attributes[key] = value;
  return value;
}

absl::Status AllowSharedMemory(const void* kernel, int bytes) {
  const int device = CurrentDevice();
  Facts& f = TheFacts();
  std::lock_guard<std::mutex> lock(f.mu);
  int& allowed = f.shared[{device, kernel}];
  if (bytes <= allowed) return absl::OkStatus();
  const cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InternalError(
        absl::StrCat("allowing a decode kernel ", bytes,
                     " bytes of shared memory: ", cudaGetErrorString(e)));
  }
  allowed = bytes;
  return absl::OkStatus();
}

int ResidentBlocks(const void* kernel, int threads, int bytes) {
  const int device = CurrentDevice();
  Facts& f = TheFacts();
  std::lock_guard<std::mutex> lock(f.mu);
  const auto key = std::make_tuple(device, kernel, threads, bytes);
  if (auto it = f.resident.find(key); it != f.resident.end()) {
    return it->second;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads,
                                                    bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return f.resident[key] = std::max(blocks, 1);
}

}  // namespace lrkv::kernels::cuda
