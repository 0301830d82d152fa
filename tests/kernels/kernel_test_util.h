// Parameter and comparison helpers shared by the CPU and CUDA kernel tests.
#ifndef LRKV_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define LRKV_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/decode_params.h"

namespace lrkv::kernels::testing {

// n standard-normal values times `scale`.
inline std::vector<float> RandomNormals(size_t n, std::mt19937& rng,
                                        float scale = 1) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (auto& x : v) x = scale * dist(rng);
  return v;
}

// The decode parameters of a shape, scale 1/sqrt(d_h); buffers are the
// caller's.
inline MhaDecodeParams MhaParamsOf(int64_t batch, int64_t heads,
                                   int64_t kv_heads, int64_t head_dim,
                                   int64_t length, int64_t capacity,
                                   CacheDType dtype) {
  MhaDecodeParams p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.length = length;
  p.capacity = capacity;
  p.dtype = dtype;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return p;
}

inline FactoredDecodeParams FactoredParamsOf(int64_t batch, int64_t heads,
                                             int64_t kv_heads, int64_t dim,
                                             int64_t rank, int64_t length,
                                             int64_t capacity,
                                             CacheDType dtype) {
  FactoredDecodeParams p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.dim = dim;
  p.rank = rank;
  p.length = length;
  p.capacity = capacity;
  p.dtype = dtype;
  p.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  return p;
}

struct Errors {
  double rel = 0;  // max|Δ| / max|ref|
  double cos = 0;  // cosine distance
};

inline Errors Compare(const std::vector<float>& a,
                      const std::vector<float>& ref) {
  double diff = 0, ref_max = 0, dot = 0, na = 0, nr = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - ref[i]));
    ref_max = std::max(ref_max, std::abs(static_cast<double>(ref[i])));
    dot += static_cast<double>(a[i]) * ref[i];
    na += static_cast<double>(a[i]) * a[i];
    nr += static_cast<double>(ref[i]) * ref[i];
  }
  return {ref_max > 0 ? diff / ref_max : diff, 1 - dot / std::sqrt(na * nr)};
}

// fp32 caches: max|Δ|/max|ref| <= 1e-5; bf16 caches: cosine distance <= 1e-5.
inline void ExpectClose(const std::vector<float>& got,
                        const std::vector<float>& ref, bool bf16,
                        const std::string& what) {
  const Errors e = Compare(got, ref);
  if (bf16) {
    EXPECT_LE(e.cos, 1e-5) << what;
  } else {
    EXPECT_LE(e.rel, 1e-5) << what;
  }
}

}  // namespace lrkv::kernels::testing

#endif  // LRKV_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
