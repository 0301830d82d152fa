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
  // The cache storages timed side by side in one run (`--cache-dtype`).
  std::vector<CacheDType> cache_dtypes = {CacheDType::kBF16};
  // The storage of the variants being set up: one of cache_dtypes, set by
  // the bench for each in turn.
  CacheDType dtype = CacheDType::kBF16;
  int threads = 0;  // 0: the current OpenMP setting
  int iterations = 15;
};

struct DecodeBenchRow {
  std::string variant;  // mha, gqa, mla, lrkv-*, or stream (the read reference)
  std::string config;
  std::string
      cache;  // the cache storage's name (CacheDTypeName); "" for stream
  int64_t context = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int64_t bytes_per_step = 0;     // cache bytes read per step
  double gbps = 0;                // bytes_per_step / median
  double ratio_to_mha = 0;        // median / the same storage's MHA median
  // median / the same variant's median with the first of cache_dtypes (0
  // where that storage has no such row).
  double ratio_to_first_cache = 0;
  double bandwidth_fraction = 0;  // gbps / this context's "stream" row
  int64_t macs_per_step = 0;      // multiply-adds of the attention itself
  // CUDA: host microseconds to enqueue one step (planning and launches,
  // mean over back-to-back calls); 0 on the CPU.
  double host_us = 0;
};

struct DecodeBenchReport {
  DecodeBenchOptions options;
  // "cpu", or the CUDA device the steps ran on ("NVIDIA H200, 132 SMs, sm_90").
  std::string device = "cpu";
  int threads = 0;    // CPU: OpenMP threads
  const char* isa = "";  // CPU: the kernels' instruction set; "cuda" on a GPU
  double stream_gbps = 0;  // the best context's "stream" row, GB/s
  double cache_ratio = 0;  // LRKV cache / MHA cache
  std::vector<DecodeBenchRow> rows;
  // Variants a storage cannot hold, and why (a block type's rows hold whole
  // blocks of 32).
  std::vector<std::string> notes;
  std::string ToTable() const;
  std::string ToJson() const;
};

absl::StatusOr<DecodeBenchReport> RunDecodeBench(
    const DecodeBenchOptions& options);

// What the CPU and CUDA benches share.
// The baselines at LRKV's cache budget: the largest GQA within it and MLA with
// a latent of equal size. InvalidArgument for impossible options.
struct BenchBaselines {
  int64_t kv_heads = 0;      // H_kv of the source (H for MHA)
  int64_t gqa_kv_heads = 0;  // == heads when no GQA fits below MHA
  int64_t mla_latent = 0;    // d_c = 2·(d_h + H_kv·r)
  double cache_ratio = 0;    // LRKV cache / MHA cache
};
absl::StatusOr<BenchBaselines> BaselinesFor(const DecodeBenchOptions& o);

// One variant's timed steps at one context.
struct TimedVariant {
  std::string name, config;
  CacheDType cache = CacheDType::kBF16;
  int64_t bytes = 0, macs = 0;
  std::vector<double> times_ms;
  double host_us = 0;  // as DecodeBenchRow::host_us
};

// The MHA/GQA step over n_kv KV heads ([B, n_kv, L, d_h] caches) and the
// absorbed MLA step over a d_c latent: shape, dtype and scale set, buffers
// (host or device) left to the caller; and their rows' name, config, bytes
// read and multiply-adds.
MhaDecodeParams BenchMhaParams(const DecodeBenchOptions& o, int64_t context,
                               int64_t n_kv);
TimedVariant BenchMhaRow(const std::string& name, const DecodeBenchOptions& o,
                         int64_t context, int64_t n_kv);
FactoredDecodeParams BenchMlaParams(const DecodeBenchOptions& o,
                                    int64_t context, int64_t latent);
// The LRKV step (all RoPE modes but reconstruct's extra inputs), likewise.
FactoredDecodeParams BenchLrkvParams(const DecodeBenchOptions& o,
                                     int64_t context, int64_t capacity);
TimedVariant BenchMlaRow(const DecodeBenchOptions& o, int64_t context,
                         int64_t latent);
// The order the benches time their variants in: every iteration one step of
// each, in a fresh shuffled order (fixed seed), so that no variant always runs
// right after the same neighbour. iterations × variants indices.
std::vector<std::vector<size_t>> InterleavedOrder(size_t variants,
                                                  int iterations);

// Appends a row per variant (median/min/max, GB/s, ratio to the "mha" row,
// fraction of the "stream" row) and raises report->stream_gbps to this
// context's stream row.
void AppendContextRows(int64_t context, std::vector<TimedVariant> variants,
                       DecodeBenchReport* report);

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_DECODE_BENCH_H_
