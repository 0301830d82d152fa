// The decode benchmark on a CUDA device (see decode_bench_cuda.h). Mirrors the
// CPU bench (decode_bench.cc): same variants at the same cache budget, same
// shuffled interleaving, same report rows. Every timed step follows a read of
// 2x the L2 cache, so that no step finds its cache (or a neighbour's) in L2, as
// in a real decode where the other layers pass through it between two steps of
// one layer; the step is timed with CUDA events around its two kernels.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/decode_attention_cuda.h"
#include "kernels/cuda/decode_bench_cuda.h"
#include "kernels/cuda/split_kernel.cuh"
#include "base/status_macros.h"

namespace lrkv::kernels::cuda {
namespace {

constexpr size_t kStreamBytes = size_t{1} << 30;

// Small pseudo-random cache values as in the CPU bench (no NaN, no
// denormals).
__global__ void FillKernel(void* data, size_t n, bool bf16, uint32_t seed) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += step) {
    const uint32_t y = static_cast<uint32_t>(i) * 2654435761u + seed;
    if (bf16) {
      static_cast<uint16_t*>(data)[i] =
          static_cast<uint16_t>(0x3c00 | (y >> 25));
    } else {
      static_cast<float*>(data)[i] =
          (static_cast<float>(y >> 9) / 8388608.0f - 0.5f) * 0.1f;
    }
  }
}

// Reads n 16-byte words, four loads in flight per thread; the xor keeps them.
__global__ void ReadKernel(const uint4* data, size_t n, unsigned int* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  unsigned int acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride);
    const uint4 c = __ldcs(data + i + 2 * stride);
    const uint4 d = __ldcs(data + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
    acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceMemory = std::unique_ptr<void, CudaFree>;

absl::StatusOr<DeviceMemory> Allocate(size_t bytes) {
  void* p = nullptr;
  RETURN_IF_ERROR(FromCuda(cudaMalloc(&p, std::max<size_t>(bytes, 16)),
                           absl::StrCat("cudaMalloc of ", bytes, " bytes")));
  return DeviceMemory(p);
}

class Events {
 public:
  Events() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~Events() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Milliseconds between two events recorded around `step` on the default
  // stream.
  absl::StatusOr<double> Time(const std::function<absl::Status()>& step) {
    cudaEventRecord(start_);
    RETURN_IF_ERROR(step());
    cudaEventRecord(stop_);
    RETURN_IF_ERROR(FromCuda(cudaEventSynchronize(stop_), "decode step"));
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    return static_cast<double>(ms);
  }

 private:
  cudaEvent_t start_, stop_;
};

struct Variant : TimedVariant {
  std::function<absl::Status()> step;
};

// The buffers of one context, freed together.
class ContextBuffers {
 public:
  explicit ContextBuffers(CacheDType dtype) : dtype_(dtype) {}
  // n cache elements of pseudo-random values.
  absl::StatusOr<void*> Cache(size_t n, uint32_t seed) {
    ASSIGN_OR_RETURN(DeviceMemory m, Allocate(n * CacheDTypeSize(dtype_)));
    FillKernel<<<1024, 256>>>(m.get(), n, dtype_ == CacheDType::kBF16, seed);
    RETURN_IF_ERROR(FromCuda(cudaGetLastError(), "fill"));
    keep_.push_back(std::move(m));
    return keep_.back().get();
  }
  // n floats equal to v.
  absl::StatusOr<float*> Floats(size_t n, float v) {
    ASSIGN_OR_RETURN(DeviceMemory m, Allocate(n * sizeof(float)));
    const std::vector<float> host(n, v);
    RETURN_IF_ERROR(FromCuda(cudaMemcpy(m.get(), host.data(), n * sizeof(float),
                                        cudaMemcpyHostToDevice),
                             "upload"));
    keep_.push_back(std::move(m));
    return static_cast<float*>(keep_.back().get());
  }

 private:
  CacheDType dtype_;
  std::vector<DeviceMemory> keep_;
};

// Host time per step, apart from the timed steps: calls enqueued back to back
// (as a decode loop issues them), the GPU left to drain after.
absl::Status TimeHostCalls(std::vector<Variant>& variants) {
  for (auto& v : variants) {
    if (v.name == "stream") continue;
    constexpr int kHostCalls = 64;
    RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "host timing"));
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kHostCalls; ++k) RETURN_IF_ERROR(v.step());
    const auto t1 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "host timing"));
    v.host_us =
        std::chrono::duration<double, std::micro>(t1 - t0).count() / kHostCalls;
  }
  return absl::OkStatus();
}

// The options with their one storage set: the CUDA bench times one bf16 or
// f32 cache.
absl::StatusOr<DecodeBenchOptions> OneCudaStorage(
    const DecodeBenchOptions& options) {
  if (options.cache_dtypes.size() != 1 ||
      IsBlockQuantized(options.cache_dtypes.front())) {
    return absl::UnimplementedError(
        "bench decode --device cuda: times one bf16 or f32 cache (the CUDA "
        "kernels have no Q8_0/Q4_0 form yet)");
  }
  DecodeBenchOptions o = options;
  o.dtype = o.cache_dtypes.front();
  return o;
}

// The report's header: options, device, baselines.
template <typename Device>
DecodeBenchReport EmptyReport(const DecodeBenchOptions& o, const Device& device,
                              const BenchBaselines& base) {
  DecodeBenchReport report;
  report.options = o;
  report.device =
      absl::StrFormat("%s, %d SMs, sm_%d", device.name, device.multiprocessors,
                      device.compute_capability);
  report.isa = "cuda";
  report.cache_ratio = base.cache_ratio;
  return report;
}

}  // namespace

absl::StatusOr<DecodeBenchReport> RunDecodeBenchCuda(
    const DecodeBenchOptions& options) {
  ASSIGN_OR_RETURN(const DecodeBenchOptions o, OneCudaStorage(options));
  ASSIGN_OR_RETURN(auto device, CurrentDevice());
  ASSIGN_OR_RETURN(auto base, BaselinesFor(o));
  DecodeBenchReport report = EmptyReport(o, device, base);
  const int64_t H = o.heads, dh = o.head_dim, r = o.rank, B = o.batch;
  const int64_t hkv = base.kv_heads, dc = base.mla_latent, lat = hkv * r;
  const int64_t es = CacheDTypeSize(o.dtype);

  ASSIGN_OR_RETURN(DeviceMemory reads, Allocate(kStreamBytes));
  ASSIGN_OR_RETURN(DeviceMemory sink, Allocate(sizeof(unsigned int)));
  cudaMemset(reads.get(), 1, kStreamBytes);
  const size_t flush_bytes =
      std::clamp<size_t>(2 * static_cast<size_t>(device.l2_bytes) / 16 * 16,
                         size_t{64} << 20, kStreamBytes);
  const int read_blocks = 8 * device.multiprocessors;
  auto read = [&](size_t bytes) {
    ReadKernel<<<read_blocks, 256>>>(static_cast<const uint4*>(reads.get()),
                                     bytes / 16,
                                     static_cast<unsigned int*>(sink.get()));
    return FromCuda(cudaGetLastError(), "read kernel");
  };
  DecodeWorkspace workspace;
  Events events;

  for (int64_t L : o.contexts) {
    ContextBuffers buffers(o.dtype);
    std::vector<Variant> variants;
    ASSIGN_OR_RETURN(auto q, buffers.Floats(B * H * std::max(dh, dc), 0.01f));
    ASSIGN_OR_RETURN(auto ql,
                     buffers.Floats(B * H * std::max<int64_t>(r, 1), 0.01f));
    ASSIGN_OR_RETURN(auto out, buffers.Floats(B * H * std::max(dh, dc), 0));
    ASSIGN_OR_RETURN(auto out_l,
                     buffers.Floats(B * H * std::max<int64_t>(r, 1), 0));
    auto add_mha = [&](const std::string& name, int64_t n_kv) -> absl::Status {
      ASSIGN_OR_RETURN(void* k, buffers.Cache(B * n_kv * L * dh, 1));
      ASSIGN_OR_RETURN(void* v, buffers.Cache(B * n_kv * L * dh, 2));
      MhaDecodeParams p = BenchMhaParams(o, L, n_kv);
      p.k = k;
      p.v = v;
      p.q = q;
      p.out = out;
      Variant var;
      static_cast<TimedVariant&>(var) = BenchMhaRow(name, o, L, n_kv);
      var.step = [p, &workspace] { return MhaDecodeCuda(p, &workspace); };
      variants.push_back(std::move(var));
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(add_mha("mha", H));
    if (base.gqa_kv_heads < H) {
      RETURN_IF_ERROR(add_mha("gqa", base.gqa_kv_heads));
    }
    {  // MLA, absorbed, equal cache: the latent is read as key and value.
      ASSIGN_OR_RETURN(void* c, buffers.Cache(B * L * dc, 3));
      FactoredDecodeParams p = BenchMlaParams(o, L, dc);
      p.k = p.v = {c, dc};
      p.q = q;
      p.out = out;
      Variant var;
      static_cast<TimedVariant&>(var) = BenchMlaRow(o, L, dc);
      var.step = [p, &workspace] { return FactoredDecodeCuda(p, &workspace); };
      variants.push_back(std::move(var));
    }
    {  // LRKV, four row segments. No RoPE and plane are the same step (plane
       // rotates the latents when they are written).
      ASSIGN_OR_RETURN(void* ks, buffers.Cache(B * L * dh, 4));
      ASSIGN_OR_RETURN(void* vs, buffers.Cache(B * L * dh, 5));
      const int64_t lat_stride = std::max<int64_t>(lat, 1);
      ASSIGN_OR_RETURN(void* zk, buffers.Cache(B * L * lat_stride, 6));
      ASSIGN_OR_RETURN(void* zv, buffers.Cache(B * L * lat_stride, 7));
      FactoredDecodeParams p = BenchLrkvParams(o, L, L);
      p.k = {ks, dh};
      p.v = {vs, dh};
      p.zk = {zk, lat_stride};
      p.zv = {zv, lat_stride};
      p.q = q;
      p.q_latent = ql;
      p.out = out;
      p.out_latent = out_l;
      for (const char* name : {"lrkv-norope", "lrkv-plane"}) {
        Variant var;
        var.name = name;
        var.cache = o.dtype;
        var.config = absl::StrCat("r=", r, " rows");
        var.bytes = B * L * 2 * (dh + lat) * es;
        var.macs = 2 * B * L * (H * dh + H * r);
        var.step = [p, &workspace] {
          return FactoredDecodeCuda(p, &workspace);
        };
        variants.push_back(std::move(var));
      }
    }
    {
      Variant var;
      var.name = "stream";
      var.config = "read 1 GiB";
      var.bytes = kStreamBytes;
      var.step = [&read] { return read(kStreamBytes); };
      variants.push_back(std::move(var));
    }
    for (auto& v : variants) RETURN_IF_ERROR(v.step());  // warm-up
    RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "warm-up"));
    for (const auto& order : InterleavedOrder(variants.size(), o.iterations)) {
      for (size_t i : order) {
        RETURN_IF_ERROR(read(flush_bytes));
        ASSIGN_OR_RETURN(const double ms, events.Time(variants[i].step));
        variants[i].times_ms.push_back(ms);
      }
    }
    RETURN_IF_ERROR(TimeHostCalls(variants));
    std::vector<TimedVariant> timed(variants.begin(), variants.end());
    AppendContextRows(L, std::move(timed), &report);
  }
  return report;
}

}  // namespace lrkv::kernels::cuda
