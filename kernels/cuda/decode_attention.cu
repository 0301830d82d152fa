// CUDA decode-step kernels (see decode_attention_cuda.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/decode_attention_cuda.h"
#include "kernels/decode_attention.h"

namespace lrkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;     // positions per shared-memory tile
constexpr int kMaxHeads = 64; // query heads handled by one factored block

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

absl::Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

// Folds a tile's scores s[h·stride + i] (i < count) into each head's running max m
// and sum l, turning the scores into weights and leaving each head's rescale factor
// for its accumulators in corr. One thread per head.
__device__ void SoftmaxTile(float* s, int64_t stride, int64_t heads, int64_t count, float* m,
                            float* l, float* corr) {
  for (int64_t h = threadIdx.x; h < heads; h += blockDim.x) {
    float mx = m[h];
    for (int64_t i = 0; i < count; ++i) mx = fmaxf(mx, s[h * stride + i]);
    float sum = 0;
    for (int64_t i = 0; i < count; ++i) {
      const float e = __expf(s[h * stride + i] - mx);
      s[h * stride + i] = e;
      sum += e;
    }
    corr[h] = __expf(m[h] - mx);
    l[h] = l[h] * corr[h] + sum;
    m[h] = mx;
  }
}

// Partial result of one (sequence, head, split): running max, sum and accumulators.
// Workspace layout: m [items], l [items], acc [items, width].

// One block per (sequence · KV head, split): the group's g query heads over a chunk.
template <typename E>
__global__ void MhaSplitKernel(MhaDecodeParams p, int64_t chunk, float* ws_m, float* ws_l,
                               float* ws_acc) {
  extern __shared__ float smem[];
  const int64_t dh = p.head_dim, g = p.heads / p.kv_heads;
  const int64_t pair = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int64_t b = pair / p.kv_heads, kvh = pair % p.kv_heads;
  const int64_t t0 = split * chunk, t1 = min(p.length, t0 + chunk);
  float* q = smem;                       // [g, dh]
  float* kt = q + g * dh;                // [kTile, dh]
  float* vt = kt + kTile * dh;           // [kTile, dh]
  float* s = vt + kTile * dh;            // [g, kTile]
  float* m = s + g * kTile;              // [g]
  float* l = m + g;                      // [g]
  float* corr = l + g;                   // [g]
  const E* k = static_cast<const E*>(p.k) + p.Offset(b, kvh, 0);
  const E* v = static_cast<const E*>(p.v) + p.Offset(b, kvh, 0);
  const int64_t step = p.Offset(0, 0, 1);
  for (int64_t i = threadIdx.x; i < g * dh; i += blockDim.x) {
    q[i] = p.q[(b * p.heads + kvh * g) * dh + i] * p.scale;
  }
  for (int64_t h = threadIdx.x; h < g; h += blockDim.x) {
    m[h] = -INFINITY;
    l[h] = 0;
  }
  // Each thread owns outputs (h, c) = idx, idx + blockDim, ... of the g·dh accumulators.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t outputs = g * dh;
  __syncthreads();
  for (int64_t t = t0; t < t1; t += kTile) {
    const int64_t count = min(static_cast<int64_t>(kTile), t1 - t);
    for (int64_t i = threadIdx.x; i < count * dh; i += blockDim.x) {
      const int64_t row = i / dh, c = i % dh;
      kt[i] = Load(k + (t + row) * step + c);
      vt[i] = Load(v + (t + row) * step + c);
    }
    __syncthreads();
    // Scores: one (head, position) pair per thread.
    for (int64_t pi = threadIdx.x; pi < g * count; pi += blockDim.x) {
      const int64_t h = pi / count, i = pi % count;
      float dot = 0;
      for (int64_t c = 0; c < dh; ++c) dot += q[h * dh + c] * kt[i * dh + c];
      s[h * kTile + i] = dot;
    }
    __syncthreads();
    SoftmaxTile(s, kTile, g, count, m, l, corr);
    __syncthreads();
    for (int64_t j = 0, o = threadIdx.x; o < outputs && j < 8; ++j, o += blockDim.x) {
      const int64_t h = o / dh, c = o % dh;
      float a = acc[j] * corr[h];
      for (int64_t i = 0; i < count; ++i) a += s[h * kTile + i] * vt[i * dh + c];
      acc[j] = a;
    }
    __syncthreads();
  }
  const int64_t item = (pair * splits + split) * g;
  for (int64_t h = threadIdx.x; h < g; h += blockDim.x) {
    ws_m[item + h] = m[h];
    ws_l[item + h] = l[h];
  }
  for (int64_t j = 0, o = threadIdx.x; o < outputs && j < 8; ++j, o += blockDim.x) {
    ws_acc[item * dh + o] = acc[j];
  }
}

// One block per (sequence, split): all H query heads over a chunk of the factored cache.
template <typename E>
__global__ void FactoredSplitKernel(FactoredDecodeParams p, int64_t chunk, int64_t tile,
                                    float* ws_m, float* ws_l, float* ws_acc) {
  extern __shared__ float smem[];
  const int64_t H = p.heads, g = H / p.kv_heads, n = p.dim, r = p.rank;
  const int64_t lat = p.kv_heads * r, width = n + r;
  const int64_t b = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int64_t t0 = split * chunk, t1 = min(p.length, t0 + chunk);
  float* q = smem;                 // [H, n]
  float* ql = q + H * n;           // [H, r]
  float* kt = ql + H * r;          // [tile, n]
  float* vt = kt + tile * n;       // [tile, n]
  float* zkt = vt + tile * n;      // [tile, lat]
  float* zvt = zkt + tile * lat;   // [tile, lat]
  float* s = zvt + tile * lat;     // [H, tile]
  float* m = s + H * tile;         // [H]
  float* l = m + H;                // [H]
  float* corr = l + H;             // [H]
  const E* kb = static_cast<const E*>(p.k.data) + b * p.capacity * p.k.stride;
  const E* vb = static_cast<const E*>(p.v.data) + b * p.capacity * p.v.stride;
  const E* zkb = r > 0 ? static_cast<const E*>(p.zk.data) + b * p.capacity * p.zk.stride
                       : nullptr;
  const E* zvb = r > 0 ? static_cast<const E*>(p.zv.data) + b * p.capacity * p.zv.stride
                       : nullptr;
  for (int64_t i = threadIdx.x; i < H * n; i += blockDim.x) q[i] = p.q[b * H * n + i] * p.scale;
  for (int64_t i = threadIdx.x; i < H * r; i += blockDim.x) {
    ql[i] = p.q_latent[b * H * r + i] * p.scale;
  }
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
    m[h] = -INFINITY;
    l[h] = 0;
  }
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = 0;
  const int64_t outputs = H * width;
  __syncthreads();
  for (int64_t t = t0; t < t1; t += tile) {
    const int64_t count = min(tile, t1 - t);
    for (int64_t i = threadIdx.x; i < count * n; i += blockDim.x) {
      const int64_t row = i / n, c = i % n;
      kt[i] = Load(kb + (t + row) * p.k.stride + c);
      vt[i] = Load(vb + (t + row) * p.v.stride + c);
    }
    for (int64_t i = threadIdx.x; i < count * lat; i += blockDim.x) {
      const int64_t row = i / lat, c = i % lat;
      zkt[i] = Load(zkb + (t + row) * p.zk.stride + c);
      zvt[i] = Load(zvb + (t + row) * p.zv.stride + c);
    }
    __syncthreads();
    for (int64_t pi = threadIdx.x; pi < H * count; pi += blockDim.x) {
      const int64_t h = pi / count, i = pi % count, kvh = h / g;
      float dot = 0;
      for (int64_t c = 0; c < n; ++c) dot += q[h * n + c] * kt[i * n + c];
      for (int64_t c = 0; c < r; ++c) dot += ql[h * r + c] * zkt[i * lat + kvh * r + c];
      if (p.sigma != nullptr) dot *= p.sigma[(b * p.capacity + t + i) * p.kv_heads + kvh];
      s[h * tile + i] = dot;
    }
    __syncthreads();
    SoftmaxTile(s, tile, H, count, m, l, corr);
    __syncthreads();
    for (int64_t j = 0, o = threadIdx.x; o < outputs && j < 16; ++j, o += blockDim.x) {
      const int64_t h = o / width, c = o % width;
      float a = acc[j] * corr[h];
      if (c < n) {
        for (int64_t i = 0; i < count; ++i) a += s[h * tile + i] * vt[i * n + c];
      } else {
        const int64_t off = (h / g) * r + (c - n);
        for (int64_t i = 0; i < count; ++i) a += s[h * tile + i] * zvt[i * lat + off];
      }
      acc[j] = a;
    }
    __syncthreads();
  }
  const int64_t item = (b * splits + split) * H;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
    ws_m[item + h] = m[h];
    ws_l[item + h] = l[h];
  }
  for (int64_t j = 0, o = threadIdx.x; o < outputs && j < 16; ++j, o += blockDim.x) {
    ws_acc[item * width + o] = acc[j];
  }
}

// Merges the splits of `rows` (sequence, head) rows: out = Σ e^{m_s−M} acc_s / Σ e^{m_s−M} l_s.
// Columns [0, n) go to out, [n, width) to out2.
__global__ void MergeKernel(int64_t rows, int64_t splits, int64_t width, int64_t n,
                            int64_t heads_per_group, const float* ws_m, const float* ws_l,
                            const float* ws_acc, float* out, float* out2) {
  const int64_t row = blockIdx.x;  // group-major: (group, head) with group = sequence·kv or sequence
  if (row >= rows) return;
  const int64_t group = row / heads_per_group, h = row % heads_per_group;
  float mx = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) {
    mx = fmaxf(mx, ws_m[(group * splits + s) * heads_per_group + h]);
  }
  float l = 0;
  for (int64_t s = 0; s < splits; ++s) {
    const int64_t item = (group * splits + s) * heads_per_group + h;
    if (ws_l[item] > 0) l += __expf(ws_m[item] - mx) * ws_l[item];
  }
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    float o = 0;
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t item = (group * splits + s) * heads_per_group + h;
      if (ws_l[item] > 0) o += __expf(ws_m[item] - mx) * ws_acc[item * width + c];
    }
    o = l > 0 ? o / l : 0.0f;
    if (c < n) {
      out[row * n + c] = o;
    } else {
      out2[row * (width - n) + (c - n)] = o;
    }
  }
}

int64_t Splits(int64_t blocks, int64_t length) {
  int sms = 1;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int64_t splits = (2 * sms + blocks - 1) / blocks;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, length / 128));
  return std::max<int64_t>(splits, 1);
}

struct Workspace {
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
  ~Workspace() {
    cudaFree(m);
    cudaFree(l);
    cudaFree(acc);
  }
  absl::Status Allocate(int64_t items, int64_t width) {
    if (auto st = FromCuda(cudaMalloc(&m, items * sizeof(float)), "cudaMalloc"); !st.ok()) return st;
    if (auto st = FromCuda(cudaMalloc(&l, items * sizeof(float)), "cudaMalloc"); !st.ok()) return st;
    return FromCuda(cudaMalloc(&acc, items * width * sizeof(float)), "cudaMalloc");
  }
};

}  // namespace

bool DeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

absl::Status MhaDecodeCuda(const MhaDecodeParams& p) {
  if (auto st = ValidateMha(p); !st.ok()) return st;
  const int64_t g = p.heads / p.kv_heads, dh = p.head_dim;
  if (g * dh > 8 * kThreads) {
    return absl::InvalidArgumentError("MHA decode (CUDA): group · head dim exceeds 2048");
  }
  const int64_t pairs = p.batch * p.kv_heads;
  const int64_t splits = Splits(pairs, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  Workspace ws;
  if (auto st = ws.Allocate(pairs * splits * g, dh); !st.ok()) return st;
  const size_t smem = sizeof(float) * (g * dh + 2 * kTile * dh + g * kTile + 3 * g);
  const dim3 grid(pairs, splits);
  if (p.dtype == CacheDType::kBF16) {
    MhaSplitKernel<__nv_bfloat16><<<grid, kThreads, smem>>>(p, chunk, ws.m, ws.l, ws.acc);
  } else {
    MhaSplitKernel<float><<<grid, kThreads, smem>>>(p, chunk, ws.m, ws.l, ws.acc);
  }
  if (auto st = FromCuda(cudaGetLastError(), "MHA split kernel"); !st.ok()) return st;
  MergeKernel<<<pairs * g, 128>>>(pairs * g, splits, dh, dh, g, ws.m, ws.l, ws.acc, p.out,
                                  nullptr);
  if (auto st = FromCuda(cudaGetLastError(), "MHA merge kernel"); !st.ok()) return st;
  return FromCuda(cudaDeviceSynchronize(), "MHA decode");
}

absl::Status FactoredDecodeCuda(const FactoredDecodeParams& p) {
  if (auto st = ValidateFactored(p); !st.ok()) return st;
  if (p.up_k_t != nullptr) {
    return absl::InvalidArgumentError("factored decode (CUDA): reconstruct mode is CPU-only");
  }
  const int64_t H = p.heads, n = p.dim, r = p.rank, lat = p.kv_heads * r;
  const int64_t width = n + r;
  if (H > kMaxHeads || H * width > 16 * kThreads) {
    return absl::InvalidArgumentError(
        "factored decode (CUDA): heads · (dim + rank) exceeds 4096");
  }
  // Shared memory: queries, the tile's four segments and the scores.
  int max_smem = 48 * 1024;
  cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  const int64_t fixed = H * n + H * r + 3 * H;
  const int64_t per_row = 2 * n + 2 * lat + H;
  const int64_t tile = std::min<int64_t>(kTile, (max_smem / 4 - fixed) / per_row);
  if (tile < 1) return absl::InvalidArgumentError("factored decode (CUDA): shape too large");
  const size_t smem = sizeof(float) * (fixed + tile * per_row);
  const int64_t splits = Splits(p.batch, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  Workspace ws;
  if (auto st = ws.Allocate(p.batch * splits * H, width); !st.ok()) return st;
  const dim3 grid(p.batch, splits);
  if (p.dtype == CacheDType::kBF16) {
    auto kernel = FactoredSplitKernel<__nv_bfloat16>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kernel<<<grid, kThreads, smem>>>(p, chunk, tile, ws.m, ws.l, ws.acc);
  } else {
    auto kernel = FactoredSplitKernel<float>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kernel<<<grid, kThreads, smem>>>(p, chunk, tile, ws.m, ws.l, ws.acc);
  }
  if (auto st = FromCuda(cudaGetLastError(), "factored split kernel"); !st.ok()) return st;
  MergeKernel<<<p.batch * H, 128>>>(p.batch * H, splits, width, n, H, ws.m, ws.l, ws.acc,
                                    p.out, p.out_latent);
  if (auto st = FromCuda(cudaGetLastError(), "factored merge kernel"); !st.ok()) return st;
  return FromCuda(cudaDeviceSynchronize(), "factored decode");
}

}  // namespace lrkv::kernels::cuda
