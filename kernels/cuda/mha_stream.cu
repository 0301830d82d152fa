// The streaming MHA/GQA split kernel: plain attention of up to four query
// heads per KV head over 16-byte-aligned K and V rows, on CUDA cores with no
// shared-memory staging. A group of LP lanes owns one position at a time
// (each lane 16 bytes of its K and V rows), so a warp reads 32/LP rows per
// step; every lane issues its loads for four steps before it uses any, which
// keeps enough bytes in flight to stream the cache at memory speed. Scores
// are reduced across the LP lanes with shuffles, the online softmax runs per
// lane group, and the groups and warps are merged at the end into the same
// partial results (m, l, acc per (group, split, head)) as the other split
// kernels, which the merge kernel combines.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/split_kernel.cuh"
#include "kernels/cuda/stream_common.cuh"
#include "base/status_macros.h"

namespace lrkv::kernels::cuda {
namespace {

constexpr int kWarps = 8;     // warps per block
constexpr int kMaxHeads = 4;  // query heads per KV head
constexpr int kAhead = kStreamAhead;

template <typename E, int G, int LP>
__global__ void __launch_bounds__(32 * kWarps)
    MhaStreamKernel(SplitArgs a, float* ws_m, float* ws_l, float* ws_acc) {
  constexpr int N = PerLoad<E>(), S = 32 / LP;
  extern __shared__ float shared[];  // [kWarps][G][2 + dim]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / LP, part = lane % LP;
  const int64_t group = blockIdx.x, split = blockIdx.y;
  const int64_t b = group / a.groups_per_sequence;
  const int64_t kvh = group % a.groups_per_sequence;
  const int64_t t0 = split * a.chunk;
  const int64_t t1 = t0 + a.chunk < a.length ? t0 + a.chunk : a.length;
  constexpr int64_t es = sizeof(E);
  const unsigned char* kp =
      a.k.data + (b * a.k.batch_offset + kvh * a.k.head_offset + part * N) * es;
  const unsigned char* vp =
      a.v.data + (b * a.v.batch_offset + kvh * a.v.head_offset + part * N) * es;
  const int64_t k_row = a.k.stride * es, v_row = a.v.stride * es;
  // The lane's N dims of each head's query, in base-2 score units.
  float q[G][N];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qg =
        a.q + (b * a.total_heads + kvh * G + g) * a.dim + part * N;
#pragma unroll
    for (int e = 0; e < N; ++e) q[g][e] = qg[e] * a.scale * kLog2e;
  }
  float m[G], l[G], acc[G][N];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0;
#pragma unroll
    for (int e = 0; e < N; ++e) acc[g][e] = 0;
  }
  constexpr int kStep = kWarps * S;  // positions the block reads per step
  // Warp-uniform trip count: every lane takes part in the shuffles.
  for (int64_t t_warp = t0 + warp * S; t_warp < t1; t_warp += kStep * kAhead) {
    uint4 kr[kAhead], vr[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t t = t_warp + u * kStep + sub;
      if (t < t1) {
        kr[u] = __ldcs(reinterpret_cast<const uint4*>(kp + t * k_row));
        vr[u] = __ldcs(reinterpret_cast<const uint4*>(vp + t * v_row));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[kAhead][G];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      float kf[N];
      Widen(kr[u], kf, static_cast<const E*>(nullptr));
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0;
#pragma unroll
        for (int e = 0; e < N; ++e) d = fmaf(q[g][e], kf[e], d);
        d = GroupSum<LP>(d);
        s[u][g] = t_warp + u * kStep + sub < t1 ? d : -INFINITY;
      }
    }
    RaiseMax(s, m, l, acc);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      float vf[N];
      Widen(vr[u], vf, static_cast<const E*>(nullptr));
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float w = Weight(s[u][g], m[g]);
        l[g] += w;
#pragma unroll
        for (int e = 0; e < N; ++e) acc[g][e] = fmaf(w, vf[e], acc[g][e]);
      }
    }
  }
  // The warp's lane groups into one state (every group then holds it).
#pragma unroll
  for (int g = 0; g < G; ++g) MergeLaneGroups<LP>(m[g], l[g], acc[g]);
  const int row = 2 + a.dim;  // floats per (warp, head) in shared memory
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float* w = shared + (warp * G + g) * row;
      if (part == 0) {
        w[0] = m[g];
        w[1] = l[g];
      }
#pragma unroll
      for (int e = 0; e < N; ++e) w[2 + part * N + e] = acc[g][e];
    }
  }
  __syncthreads();
  // The warps into the split's result, a thread per (head, column).
  for (int c = threadIdx.x; c < G * a.dim; c += blockDim.x) {
    const int g = c / a.dim, col = c % a.dim;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, shared[(w * G + g) * row]);
    float total = 0, sum = 0;
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float* x = shared + (w * G + g) * row;
        const float f = Weight(x[0], mx);
        total += f * x[1];
        sum += f * x[2 + col];
      }
    }
    const int64_t item = (group * gridDim.y + split) * G + g;
    ws_acc[item * a.dim + col] = sum;
    if (col == 0) {
      // m back in natural-log units, as the merge kernel reads it.
      ws_m[item] = mx * kLn2;
      ws_l[item] = total;
    }
  }
}

// Calls f(kernel) with the instantiation for the element type, heads per
// group and lanes per row.
template <typename E, int G, typename F>
absl::Status WithLanes(int lanes, F&& f) {
  switch (lanes) {
    case 1:
      return f(MhaStreamKernel<E, G, 1>);
    case 2:
      return f(MhaStreamKernel<E, G, 2>);
    case 4:
      return f(MhaStreamKernel<E, G, 4>);
    case 8:
      return f(MhaStreamKernel<E, G, 8>);
    case 16:
      return f(MhaStreamKernel<E, G, 16>);
    case 32:
      return f(MhaStreamKernel<E, G, 32>);
    default:
      return absl::InvalidArgumentError("streaming MHA kernel: row width");
  }
}

template <typename E, typename F>
absl::Status WithHeads(int heads, int lanes, F&& f) {
  switch (heads) {
    case 1:
      return WithLanes<E, 1>(lanes, f);
    case 2:
      return WithLanes<E, 2>(lanes, f);
    case 3:
      return WithLanes<E, 3>(lanes, f);
    case 4:
      return WithLanes<E, 4>(lanes, f);
    default:
      return absl::InvalidArgumentError("streaming MHA kernel: heads");
  }
}

// Calls f(kernel) with the kernel for the arguments, its shared memory
// allowed.
template <typename F>
absl::Status WithMhaStreamKernel(const SplitArgs& a, CacheDType dtype, F&& f) {
  const int n =
      dtype == CacheDType::kBF16 ? PerLoad<__nv_bfloat16>() : PerLoad<float>();
  const int bytes = kWarps * a.heads * (2 + a.dim) * 4;
  auto allowed = [&](auto kernel) {
    RETURN_IF_ERROR(
        AllowSharedMemory(reinterpret_cast<const void*>(kernel), bytes));
    return f(kernel, bytes);
  };
  return dtype == CacheDType::kBF16
             ? WithHeads<__nv_bfloat16>(a.heads, a.dim / n, allowed)
             : WithHeads<float>(a.heads, a.dim / n, allowed);
}

}  // namespace

bool MhaStreamKernelSupports(const SplitArgs& a, CacheDType dtype) {
  const int n =
      dtype == CacheDType::kBF16 ? PerLoad<__nv_bfloat16>() : PerLoad<float>();
  const int lanes = a.dim / n;
  // Plain attention only (no latents, QK-norm scales or shared K/V), rows
  // whose every start is 16-byte aligned, one load per lane per row.
  return a.rank == 0 && !a.shared_kv && a.sigma == nullptr && a.heads >= 1 &&
         a.heads <= kMaxHeads && a.k.vector == 16 && a.v.vector == 16 &&
         a.dim % n == 0 && lanes >= 1 && lanes <= 32 &&
         (lanes & (lanes - 1)) == 0;
}

int64_t PlanMhaStreamSplits(SplitArgs& a, CacheDType dtype, int64_t groups,
                            int multiprocessors) {
  // One wave of as many blocks as fit on the SMs.
  int per_sm = 1;
  (void)WithMhaStreamKernel(a, dtype, [&](auto kernel, int bytes) {
    per_sm = ResidentBlocks(reinterpret_cast<const void*>(kernel), 32 * kWarps,
                            bytes);
    return absl::OkStatus();
  });
  return ChunkSplits(a, static_cast<int64_t>(per_sm) * multiprocessors / groups,
                     16);
}

absl::Status LaunchMhaStreamSplits(const SplitArgs& a, CacheDType dtype,
                                   int64_t groups, int64_t splits, float* ws_m,
                                   float* ws_l, float* ws_acc,
                                   cudaStream_t stream) {
  return WithMhaStreamKernel(a, dtype, [&](auto kernel, int bytes) {
    kernel<<<dim3(groups, splits), 32 * kWarps, bytes, stream>>>(a, ws_m, ws_l,
                                                                 ws_acc);
    return FromCuda(cudaGetLastError(), "streaming MHA split kernel");
  });
}

}  // namespace lrkv::kernels::cuda
