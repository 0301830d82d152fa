// The decode benchmark on a CUDA device: MHA, budget-matched GQA and MLA, and
// LRKV (no-RoPE and plane) decode steps of the CUDA kernels, timed interleaved
// with CUDA events, beside a streaming read of device memory timed the same
// way. Same options and report as the CPU bench (decode_bench.h).
#ifndef LRKV_KERNELS_CUDA_DECODE_BENCH_CUDA_H_
#define LRKV_KERNELS_CUDA_DECODE_BENCH_CUDA_H_

#include "absl/status/statusor.h"
#include "kernels/decode_bench.h"

namespace lrkv::kernels::cuda {

// FailedPrecondition without a device; InvalidArgument for bad options.
absl::StatusOr<DecodeBenchReport> RunDecodeBenchCuda(
    const DecodeBenchOptions& options);

}  // namespace lrkv::kernels::cuda

#endif  // LRKV_KERNELS_CUDA_DECODE_BENCH_CUDA_H_
