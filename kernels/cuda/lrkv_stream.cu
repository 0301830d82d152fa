// The streaming factored (LRKV) split kernel: a block takes one sequence's
// chunk of positions, a warp per query head (two past 16 heads). Every warp
// streams the shared key and value rows as mha_stream.cu streams MHA rows
// (lane groups of LP lanes, 16-byte loads, four positions ahead) plus its KV
// head's latent slices (a lane takes every LP-th latent element, so a group
// reads a slice in one coalesced pass). The shared rows are read by every
// warp of the block at nearly the same time: one warp's loads go to memory,
// the others' are served by L1 (cached loads; the latents, read once, are
// streaming loads). No shared memory and no barrier: each warp writes its
// heads' partial results (m, l, acc over dim + rank columns) for the merge
// kernel. It serves fp32 caches and groups of more than 16 heads; bf16 caches
// of up to 16 heads run faster on the tensor-core kernel (decode_attention.cu
// says what was measured), as this one holds one 12-warp block per SM at the
// paper shape (128 registers a thread) with few rows in flight.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/split_kernel.cuh"
#include "kernels/cuda/stream_common.cuh"
#include "base/status_macros.h"

namespace lrkv::kernels::cuda {
namespace {

constexpr int kMaxWarps = 16;
constexpr int kMaxHeads = 2 * kMaxWarps;

// Warps of a block for `heads` query heads, and heads per warp.
int HeadsPerWarp(int heads) { return heads <= kMaxWarps ? 1 : 2; }
int WarpsFor(int heads) {
  return (heads + HeadsPerWarp(heads) - 1) / HeadsPerWarp(heads);
}

// One latent element, a streaming load (read once).
__device__ __forceinline__ float LoadLatent(const unsigned char* p,
                                            const float*) {
  return __ldcs(reinterpret_cast<const float*>(p));
}
__device__ __forceinline__ float LoadLatent(const unsigned char* p,
                                            const __nv_bfloat16*) {
  return __uint_as_float(
      static_cast<uint32_t>(__ldcs(reinterpret_cast<const unsigned short*>(p)))
      << 16);
}

// G heads per warp, LP lanes per shared row, RJ latent elements per lane
// (rank <= RJ·LP).
template <typename E, int G, int LP, int RJ>
__global__ void __launch_bounds__(32 * kMaxWarps)
    LrkvStreamKernel(SplitArgs a, float* ws_m, float* ws_l, float* ws_acc) {
  constexpr int N = PerLoad<E>(), S = 32 / LP, NA = N + RJ;
  constexpr int RJA = RJ > 0 ? RJ : 1;  // array length (loops run to RJ)
  // Positions per lane group loaded before use: fewer where the latents and
  // a second head's state would push the loads out of registers.
  constexpr int kAhead =
      G == 1 ? (RJ <= 2 ? kStreamAhead : kStreamAhead - 1) : 2;
  constexpr int64_t es = sizeof(E);
  const E* tag = nullptr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const int sub = lane / LP, part = lane % LP;
  const int64_t b = blockIdx.x, split = blockIdx.y;
  const int64_t t0 = split * a.chunk;
  const int64_t t1 = t0 + a.chunk < a.length ? t0 + a.chunk : a.length;
  const int H = a.heads, r = a.rank, per_kv = a.heads / a.latent_groups;
  const unsigned char* kp = a.k.data + (b * a.k.batch_offset + part * N) * es;
  const unsigned char* vp = a.v.data + (b * a.v.batch_offset + part * N) * es;
  const int64_t k_row = a.k.stride * es, v_row = a.v.stride * es;
  const int64_t zk_row = a.zk.stride * es, zv_row = a.zv.stride * es;
  // Each head's query (the lane's N dims) and latent query (its RJ elements),
  // in base-2 score units, and where its KV head's slices start.
  int head[G], kvh[G];
  float q[G][N], ql[G][RJA];
  const unsigned char *zkp[G], *zvp[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    head[g] = warp + g * warps;
    const int h = head[g] < H ? head[g] : H - 1;  // spare slots repeat one
    kvh[g] = h / per_kv;
    const float f = a.scale * kLog2e;
    const float* qh = a.q + (b * H + h) * a.dim + part * N;
#pragma unroll
    for (int e = 0; e < N; ++e) q[g][e] = qh[e] * f;
#pragma unroll
    for (int i = 0; i < RJ; ++i) {
      const int j = part + i * LP;
      ql[g][i] = j < r ? a.q_latent[(b * H + h) * r + j] * f : 0.0f;
    }
    zkp[g] = a.zk.data + (b * a.zk.batch_offset + kvh[g] * r + part) * es;
    zvp[g] = a.zv.data + (b * a.zv.batch_offset + kvh[g] * r + part) * es;
  }
  const float* sigma =
      a.sigma != nullptr ? a.sigma + b * a.capacity * a.latent_groups : nullptr;
  float m[G], l[G], acc[G][NA];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0;
#pragma unroll
    for (int e = 0; e < NA; ++e) acc[g][e] = 0;
  }
  // Every warp walks every position of the chunk (its heads need them all),
  // S positions (one per lane group) per step.
  constexpr int step = S;
  for (int64_t t_warp = t0; t_warp < t1; t_warp += step * kAhead) {
    uint4 kr[kAhead], vr[kAhead];
    float zk[kAhead][G][RJA], zv[kAhead][G][RJA];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t t = t_warp + u * step + sub;
      const bool valid = t < t1;
      // Cached loads: the block's other warps read the same rows.
      kr[u] = valid ? __ldg(reinterpret_cast<const uint4*>(kp + t * k_row))
                    : make_uint4(0, 0, 0, 0);
      vr[u] = valid ? __ldg(reinterpret_cast<const uint4*>(vp + t * v_row))
                    : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int i = 0; i < RJ; ++i) {
          const bool in = valid && part + i * LP < r;
          zk[u][g][i] =
              in ? LoadLatent(zkp[g] + t * zk_row + i * LP * es, tag) : 0.0f;
          zv[u][g][i] =
              in ? LoadLatent(zvp[g] + t * zv_row + i * LP * es, tag) : 0.0f;
        }
      }
    }
    float s[kAhead][G];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t t = t_warp + u * step + sub;
      float kf[N];
      Widen(kr[u], kf, tag);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0;
#pragma unroll
        for (int e = 0; e < N; ++e) d = fmaf(q[g][e], kf[e], d);
#pragma unroll
        for (int i = 0; i < RJ; ++i) d = fmaf(ql[g][i], zk[u][g][i], d);
        d = GroupSum<LP>(d);
        if (sigma != nullptr && t < t1) {
          d *= __ldg(sigma + t * a.latent_groups + kvh[g]);
        }
        s[u][g] = t < t1 ? d : -INFINITY;
      }
    }
    RaiseMax(s, m, l, acc);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      float vf[N];
      Widen(vr[u], vf, tag);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float w = Weight(s[u][g], m[g]);
        l[g] += w;
#pragma unroll
        for (int e = 0; e < N; ++e) acc[g][e] = fmaf(w, vf[e], acc[g][e]);
#pragma unroll
        for (int i = 0; i < RJ; ++i) {
          acc[g][N + i] = fmaf(w, zv[u][g][i], acc[g][N + i]);
        }
      }
    }
  }
  const int width = a.dim + r;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    MergeLaneGroups<LP>(m[g], l[g], acc[g]);
    if (head[g] >= H || sub != 0) continue;
    const int64_t item = (b * gridDim.y + split) * H + head[g];
    float* out = ws_acc + item * width;
#pragma unroll
    for (int e = 0; e < N; ++e) out[part * N + e] = acc[g][e];
#pragma unroll
    for (int i = 0; i < RJ; ++i) {
      const int j = part + i * LP;
      if (j < r) out[a.dim + j] = acc[g][N + i];
    }
    if (part == 0) {
      ws_m[item] = m[g] * kLn2;  // natural-log units, as the merge reads it
      ws_l[item] = l[g];
    }
  }
}

// Latent elements per lane the kernel is instantiated for.
int LatentPerLane(int rank, int lanes) {
  const int need = (rank + lanes - 1) / lanes;
  for (int n : {0, 1, 2, 4}) {
    if (n >= need) return n;
  }
  return -1;
}

template <typename E, int G, int LP, typename F>
absl::Status WithLatent(int rj, F&& f) {
  switch (rj) {
    case 0:
      return f(LrkvStreamKernel<E, G, LP, 0>);
    case 1:
      return f(LrkvStreamKernel<E, G, LP, 1>);
    case 2:
      return f(LrkvStreamKernel<E, G, LP, 2>);
    case 4:
      return f(LrkvStreamKernel<E, G, LP, 4>);
    default:
      return absl::InvalidArgumentError("streaming LRKV kernel: rank");
  }
}

template <typename E, int G, typename F>
absl::Status WithLanes(int lanes, int rj, F&& f) {
  switch (lanes) {
    case 4:
      return WithLatent<E, G, 4>(rj, f);
    case 8:
      return WithLatent<E, G, 8>(rj, f);
    case 16:
      return WithLatent<E, G, 16>(rj, f);
    case 32:
      return WithLatent<E, G, 32>(rj, f);
    default:
      return absl::InvalidArgumentError("streaming LRKV kernel: row width");
  }
}

int LanesFor(const SplitArgs& a, CacheDType dtype) {
  const int n =
      dtype == CacheDType::kBF16 ? PerLoad<__nv_bfloat16>() : PerLoad<float>();
  return a.dim % n == 0 ? a.dim / n : 0;
}

// Calls f(kernel) with the instantiation for the arguments.
template <typename F>
absl::Status WithLrkvKernel(const SplitArgs& a, CacheDType dtype, F&& f) {
  const int lanes = LanesFor(a, dtype);
  const int rj = LatentPerLane(a.rank, std::max(lanes, 1));
  auto with_g = [&](auto tag) {
    using E = decltype(tag);
    return HeadsPerWarp(a.heads) == 1 ? WithLanes<E, 1>(lanes, rj, f)
                                      : WithLanes<E, 2>(lanes, rj, f);
  };
  return dtype == CacheDType::kBF16 ? with_g(__nv_bfloat16()) : with_g(float());
}

}  // namespace

bool LrkvStreamKernelSupports(const SplitArgs& a, CacheDType dtype) {
  const int lanes = LanesFor(a, dtype);
  // A factored cache (one group per sequence), shared rows of one 16-byte
  // load per lane (4 to 32 lanes), up to 4 latent elements per lane, at most
  // 32 heads, key and value separate.
  return a.groups_per_sequence == 1 && !a.shared_kv && a.heads >= 1 &&
         a.heads <= kMaxHeads && a.latent_groups >= 1 &&
         a.heads % a.latent_groups == 0 && a.k.vector == 16 &&
         a.v.vector == 16 &&
         (lanes == 4 || lanes == 8 || lanes == 16 || lanes == 32) &&
         LatentPerLane(a.rank, lanes) >= 0;
}

int64_t PlanLrkvStreamSplits(SplitArgs& a, CacheDType dtype, int64_t groups,
                             int multiprocessors) {
  const int threads = 32 * WarpsFor(a.heads);
  int per_sm = 1;
  (void)WithLrkvKernel(a, dtype, [&](auto kernel) {
    per_sm = ResidentBlocks(reinterpret_cast<const void*>(kernel), threads, 0);
    return absl::OkStatus();
  });
  // One wave of as many blocks as fit on the SMs.
  return ChunkSplits(a, static_cast<int64_t>(per_sm) * multiprocessors / groups,
                     16);
}

absl::Status LaunchLrkvStreamSplits(const SplitArgs& a, CacheDType dtype,
                                    int64_t groups, int64_t splits, float* ws_m,
                                    float* ws_l, float* ws_acc,
                                    cudaStream_t stream) {
  const int threads = 32 * WarpsFor(a.heads);
  return WithLrkvKernel(a, dtype, [&](auto kernel) {
    kernel<<<dim3(groups, splits), threads, 0, stream>>>(a, ws_m, ws_l, ws_acc);
    return FromCuda(cudaGetLastError(), "streaming LRKV split kernel");
  });
}

}  // namespace lrkv::kernels::cuda
