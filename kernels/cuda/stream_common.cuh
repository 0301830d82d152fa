// What the streaming split kernels share (mha_stream.cu, lrkv_stream.cu): a
// group of LP lanes owns one cached position at a time, each lane 16 bytes of
// a row, with scores in base-2 units (queries pre-scaled by log2 e) for exp2.
// Included by the .cu files only.
#ifndef LRKV_KERNELS_CUDA_STREAM_COMMON_CUH_
#define LRKV_KERNELS_CUDA_STREAM_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lrkv::kernels::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;  // m back to natural-log units
constexpr int kStreamAhead = 4;  // positions per lane group loaded before use

// Elements in one 16-byte load.
template <typename E>
__host__ __device__ constexpr int PerLoad() {
  return 16 / static_cast<int>(sizeof(E));
}

// The PerLoad<E>() floats of one 16-byte load.
__device__ __forceinline__ void Widen(const uint4& x, float* f, const float*) {
  f[0] = __uint_as_float(x.x);
  f[1] = __uint_as_float(x.y);
  f[2] = __uint_as_float(x.z);
  f[3] = __uint_as_float(x.w);
}
__device__ __forceinline__ void Widen(const uint4& x, float* f,
                                      const __nv_bfloat16*) {
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// exp2(x - m), 0 where x is -inf (masked); m is finite whenever x is.
__device__ __forceinline__ float Weight(float x, float m) {
  return x == -INFINITY ? 0.0f : exp2f(x - m);
}

// Raises each of G heads' running maximum m to cover this step's U scores
// s[u][g], rescaling its sum l and its NA accumulators; heads with no valid
// score yet are left as they are.
template <int U, int G, int NA>
__device__ __forceinline__ void RaiseMax(const float (&s)[U][G], float (&m)[G],
                                         float (&l)[G], float (&acc)[G][NA]) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float mx = m[g];
#pragma unroll
    for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u][g]);
    if (mx == -INFINITY) continue;
    const float corr = Weight(m[g], mx);
    l[g] *= corr;
#pragma unroll
    for (int e = 0; e < NA; ++e) acc[g][e] *= corr;
    m[g] = mx;
  }
}

// Sum over the LP lanes of a group (xor shuffles; every lane takes part).
template <int LP>
__device__ __forceinline__ float GroupSum(float d) {
#pragma unroll
  for (int o = LP / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
  return d;
}

// Merges the online-softmax states (m, l, acc[n]) of the warp's lane groups
// (LP lanes each; lanes at the same place in their groups hold the same
// columns): afterwards every group holds the warp's state.
template <int LP, int NA>
__device__ __forceinline__ void MergeLaneGroups(float& m, float& l,
                                                float (&acc)[NA]) {
#pragma unroll
  for (int o = LP; o < 32; o <<= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, o);
    const float mx = fmaxf(m, m2);
    const float c1 = Weight(m, mx), c2 = Weight(m2, mx);
    l = l * c1 + l2 * c2;
#pragma unroll
    for (int e = 0; e < NA; ++e) {
      const float a2 = __shfl_xor_sync(0xffffffffu, acc[e], o);
      acc[e] = acc[e] * c1 + a2 * c2;
    }
    m = mx;
  }
}

}  // namespace lrkv::kernels::cuda

#endif  // LRKV_KERNELS_CUDA_STREAM_COMMON_CUH_
