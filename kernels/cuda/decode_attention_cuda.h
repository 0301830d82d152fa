// CUDA versions of the decode-step kernels (MHA/GQA and factored LRKV /
// absorbed MLA). Same parameter structs as the CPU kernels, with every buffer
// in device memory and factored caches in the row layout. Split over positions
// (flash-decoding): each block stages tiles of K/V (or of the four factored
// segments) in shared memory, scores and accumulates them in one pass with an
// online softmax, and a second kernel merges the splits. Built only when CMake
// finds nvcc; tests named *_CUDA skip without a GPU.
#ifndef LRKV_KERNELS_CUDA_DECODE_ATTENTION_CUDA_H_
#define LRKV_KERNELS_CUDA_DECODE_ATTENTION_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/decode_params.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace lrkv::kernels::cuda {

// True when a CUDA device is present and usable.
bool DeviceAvailable();

struct DeviceInfo {
  std::string name;
  int multiprocessors = 0;
  int compute_capability = 0;  // 90 for Hopper
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
};
// The current device; FailedPrecondition without one.
absl::StatusOr<DeviceInfo> CurrentDevice();

// Device scratch for the per-split partial results, grown on demand and kept
// across calls, so that a decode loop (or a benchmark) allocates nothing per
// step.
class DecodeWorkspace {
 public:
  DecodeWorkspace() = default;
  DecodeWorkspace(const DecodeWorkspace&) = delete;
  DecodeWorkspace& operator=(const DecodeWorkspace&) = delete;
  ~DecodeWorkspace();
  // At least `bytes` of device memory (previous contents are not kept).
  absl::Status Reserve(size_t bytes);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Device pointers in `p`. With a workspace the call only queues the two
// kernels on `stream` and returns (launch errors only); without one it
// allocates a temporary workspace, waits for the kernels and returns their
// errors too. Factored caches must use CacheLayout::kRows, and reconstruct
// mode is CPU-only (both InvalidArgument).
absl::Status MhaDecodeCuda(const MhaDecodeParams& p,
                           DecodeWorkspace* workspace = nullptr,
                           CUstream_st* stream = nullptr);
absl::Status FactoredDecodeCuda(const FactoredDecodeParams& p,
                                DecodeWorkspace* workspace = nullptr,
                                CUstream_st* stream = nullptr);

}  // namespace lrkv::kernels::cuda

#endif  // LRKV_KERNELS_CUDA_DECODE_ATTENTION_CUDA_H_
