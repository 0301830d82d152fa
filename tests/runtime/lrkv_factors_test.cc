// The factored engine's float32 loops (runtime/lrkv_factors.h) against float64:
// each result within the rounding bound of its float32 sums (n terms summed in
// order: |error| ≤ (n + 1)·u·Σ|terms|, u = 2^-24), the copies exact, and a
// projection's shared and latent matrices read as one only where they are
// adjacent in memory. Shapes: Qwen3-0.6B's attention (16 query heads, 8 KV
// heads, d_h = 128, r = 46) and a small one with one KV head.
#include "runtime/lrkv_factors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace lrkv {
namespace {

constexpr double kUnit = std::numeric_limits<float>::epsilon() / 2;

struct Shape {
  int64_t heads, kv_heads, dim, rank;
};
constexpr Shape kShapes[] = {{16, 8, 128, 46}, {4, 1, 16, 6}};

// Factors of random float32 B_h [Hkv, dh, r] and biases δ_h [Hkv, dh].
Factors RandomFactors(const Shape& s) {
  LowRankProjection p;
  const int64_t d = 32;
  p.shared = at::randn({s.dim, d});
  p.down = at::randn({s.kv_heads * s.rank, d});
  p.up = at::randn({s.kv_heads, s.dim, s.rank}) / std::sqrt(s.rank);
  p.head_bias = at::randn({s.kv_heads * s.dim});
  return FactorsOf(p, s.kv_heads, s.dim);
}

// Elementwise |got - ref| - bound, its maximum (≤ 0 when every element holds).
double Excess(const at::Tensor& got, const at::Tensor& ref,
              const at::Tensor& bound) {
  return ((got.to(at::kDouble) - ref).abs() - bound).max().item<double>();
}

TEST(LrkvFactors, ValueResultIsWithinItsSumsRoundingOfFloat64) {
  at::manual_seed(11);
  for (const Shape& s : kShapes) {
    const Factors v = RandomFactors(s);
    const int64_t n = 3, g = s.heads / s.kv_heads;
    const at::Tensor out = at::randn({n, s.heads, s.dim});
    const at::Tensor lat = at::randn({n, s.heads, s.rank});
    const at::Tensor got = ValueResult(out, lat, v);
    ASSERT_EQ(got.sizes(), out.sizes());
    // Query head h reads KV head h / g.
    const at::Tensor up = v.up.to(at::kDouble).repeat_interleave(g, 0);
    const at::Tensor delta = v.delta.to(at::kDouble).repeat_interleave(g, 0);
    const at::Tensor terms =
        at::einsum("nhr,hdr->nhdr", {lat.to(at::kDouble), up});
    const at::Tensor ref = out.to(at::kDouble) + terms.sum(-1) + delta;
    const at::Tensor mass =
        out.to(at::kDouble).abs() + terms.abs().sum(-1) + delta.abs();
    EXPECT_LE(Excess(got, ref, (s.rank + 3) * kUnit * mass), 0)
        << "H " << s.heads << " r " << s.rank;
  }
}

TEST(LrkvFactors, KeyNormScalesAreWithinTheirSumsRoundingOfFloat64) {
  at::manual_seed(12);
  const double eps = 1e-6;
  for (const Shape& s : kShapes) {
    const Factors k = RandomFactors(s);
    const int64_t n = 2;
    const at::Tensor ks = at::randn({n, s.dim});
    const at::Tensor zk = at::randn({n, s.kv_heads, s.rank});
    const at::Tensor terms =
        at::einsum("nhr,hdr->nhdr", {zk.to(at::kDouble), k.up.to(at::kDouble)});
    const at::Tensor key = ks.to(at::kDouble).unsqueeze(1) + terms.sum(-1) +
                           k.delta.to(at::kDouble);  // [n, Hkv, dh]
    // Each k_c is off by at most e_c = (r + 3)·u·Σ|terms|; its square then by
    // 2|k_c|e_c + e_c² + u·k_c², and the mean of m squares by their sum plus
    // (m + 1)·u of the sum of squares.
    const at::Tensor e = (s.rank + 3) * kUnit *
                         (ks.to(at::kDouble).abs().unsqueeze(1) +
                          terms.abs().sum(-1) + k.delta.to(at::kDouble).abs());
    const at::Tensor sq_err = 2 * key.abs() * e + e * e + kUnit * key * key;
    for (bool over_heads : {false, true}) {
      const std::vector<int64_t> dims =
          over_heads ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2};
      const int64_t m = over_heads ? s.kv_heads * s.dim : s.dim;
      const at::Tensor mean = (key * key).sum(dims) / m;
      const at::Tensor mean_err = sq_err.sum(dims) / m + (m + 1) * kUnit * mean;
      const at::Tensor ref = at::rsqrt(mean + eps);
      // σ = (mean + eps)^-1/2: a relative error ε of its argument moves σ by
      // about ε/2; three more float32 roundings (the eps sum, sqrt, 1/x).
      const at::Tensor bound = ref * (mean_err / (mean + eps) + 4 * kUnit);
      const at::Tensor got = KeyNormScales(ks, zk, k, over_heads, eps);
      ASSERT_EQ(got.size(1), over_heads ? 1 : s.kv_heads);
      EXPECT_LE(Excess(got, over_heads ? ref.unsqueeze(1) : ref, bound), 0)
          << "Hkv " << s.kv_heads << (over_heads ? " over heads" : "");
    }
  }
}

TEST(LrkvFactors, LatentsAndQueryCoordinatesAreTheAtenExpressions) {
  at::manual_seed(13);
  for (const Shape& s : kShapes) {
    const at::Tensor z = at::randn({2, s.kv_heads, s.rank});
    const at::Tensor bias = at::randn({s.kv_heads, s.rank});
    const at::Tensor gamma = at::randn({s.kv_heads, s.rank});
    EXPECT_TRUE(at::equal(ScaledLatents(z, bias, gamma), (z + bias) * gamma));
    const at::Tensor coords =
        at::randint(s.dim, {s.kv_heads, s.rank}, at::kLong);
    const at::Tensor q = at::randn({2, s.heads, s.dim});
    const int64_t g = s.heads / s.kv_heads;
    const at::Tensor ref = q.gather(
        2, coords.repeat_interleave(g, 0).unsqueeze(0).expand({2, -1, -1}));
    EXPECT_TRUE(at::equal(QueryPlaneCoordinates(q, coords), ref));
  }
}

TEST(LrkvFactors, SharedAndDownAreOneMatrixOnlyWhereAdjacent) {
  const Shape s = kShapes[0];
  const int64_t d = 32;
  const at::Tensor both =
      at::randn({s.dim + s.kv_heads * s.rank, d}).to(at::kBFloat16);
  LowRankProjection p;
  p.shared = both.narrow(0, 0, s.dim);
  p.down = both.narrow(0, s.dim, s.kv_heads * s.rank);
  p.up = at::randn({s.kv_heads, s.dim, s.rank});
  const Factors adjacent = FactorsOf(p, s.kv_heads, s.dim);
  ASSERT_TRUE(adjacent.shared_and_down.defined());
  EXPECT_EQ(adjacent.shared_and_down.data_ptr(), both.data_ptr());
  EXPECT_TRUE(at::equal(adjacent.shared_and_down, both));
  // Separate allocations, a gap, or another dtype: two products.
  p.down = p.down.clone();
  EXPECT_FALSE(FactorsOf(p, s.kv_heads, s.dim).shared_and_down.defined());
  p.shared = both.narrow(0, 0, s.dim - 1);
  p.down = both.narrow(0, s.dim, s.kv_heads * s.rank);
  EXPECT_FALSE(FactorsOf(p, s.kv_heads, s.dim).shared_and_down.defined());
  p.shared = both.narrow(0, 0, s.dim).to(at::kFloat);
  EXPECT_FALSE(FactorsOf(p, s.kv_heads, s.dim).shared_and_down.defined());
}

}  // namespace
}  // namespace lrkv
