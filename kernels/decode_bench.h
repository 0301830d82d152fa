// The decode benchmark: MHA, budget-matched GQA and MLA, and LRKV (no-RoPE,
// plane and reconstruct) decode steps timed interleaved in one run over
// synthetic caches, with bytes read per step, achieved bandwidth, the ratio to
// MHA, and this machine's streaming-read bandwidth measured in the same run
// with the same thread count.
#ifndef LRKV_KERNELS_DECODE_BENCH_H_
#define LRKV_KERNELS_DECODE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/decode_params.h"

namespace lrkv::kernels {

struct DecodeBenchOptions {
  int64_t heads = 12;
  int64_t kv_heads = 0;  // source KV heads; 0 = MHA
  int64_t head_dim = 128;
  int64_t rank = 51;
  int64_t batch = 4;
  std::vector<int64_t> contexts = {512, 2048, 8192, 32768};
  CacheDType dtype = CacheDType::kBF16;
  int threads = 0;  // 0: the current OpenMP setting
  int iterations = 15;
};

struct DecodeBenchRow {
  std::string variant;  // mha, gqa, mla, lrkv-*, or stream (the read reference)
  std::string config;
  int64_t context = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int64_t bytes_per_step = 0;     // cache bytes read per step
  double gbps = 0;                // bytes_per_step / median
  double ratio_to_mha = 0;        // median / MHA median
  double bandwidth_fraction = 0;  // gbps / this context's "stream" row
  int64_t macs_per_step = 0;      // multiply-adds of the attention itself
};

struct DecodeBenchReport {
  DecodeBenchOptions options;
  int threads = 0;
  const char* isa = "";
  double stream_gbps = 0;  // the best context's "stream" row, GB/s
  double cache_ratio = 0;  // LRKV cache / MHA cache
  std::vector<DecodeBenchRow> rows;
  std::string ToTable() const;
  std::string ToJson() const;
};

absl::StatusOr<DecodeBenchReport> RunDecodeBench(
    const DecodeBenchOptions& options);

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_DECODE_BENCH_H_
