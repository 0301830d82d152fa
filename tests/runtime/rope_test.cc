// Rope::Rotate's float32 loop (every decode step's query and key) against the
// float64 ATen expression, for both layouts, partial rotary dims, the partial
// RoPE mode, scaled frequencies with an attention factor, and shared or
// per-sequence positions: each coordinate within the float32 rounding bound of
// a rotation, 2·eps·(|x0| + |x1|)·factor.
#include "runtime/rope.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace lrkv {
namespace {

ModelConfig RopeConfig(int64_t head_dim, int64_t rope_dim, RopeLayout layout) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_dim = rope_dim;
  c.rope_layout = layout;
  c.rope_theta = 1e6;
  c.num_layers = 1;
  return c;
}

void ExpectRotatesWithinRounding(const ModelConfig& c,
                                 const at::Tensor& positions, int64_t batch,
                                 const std::string& what) {
  at::manual_seed(3);
  const int64_t T = positions.size(-1), n = 3;
  const at::Tensor x = at::randn({batch, T, n, c.head_dim}, at::kFloat) * 4;
  const Rope rope(c);
  const at::Tensor got = rope.Rotate(x, positions);
  const at::Tensor want = rope.Rotate(x.to(at::kDouble), positions);
  ASSERT_EQ(got.sizes(), x.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), at::kFloat) << what;
  // The bound per coordinate: both coordinates of its plane in magnitude (or
  // the coordinate itself, for dims RoPE leaves alone).
  const int64_t half = c.rope_dim / 2;
  const at::Tensor rot = x.narrow(-1, 0, c.rope_dim).abs();
  at::Tensor pair_mag;
  if (c.rope_layout == RopeLayout::kAdjacent) {
    const auto p = rot.unflatten(-1, {half, 2}).sum(-1, true);
    pair_mag = p.expand({batch, T, n, half, 2}).flatten(-2);
  } else {
    const auto p = rot.narrow(-1, 0, half) + rot.narrow(-1, half, half);
    pair_mag = at::cat({p, p}, -1);
  }
  pair_mag = at::cat(
      {pair_mag, x.narrow(-1, c.rope_dim, c.head_dim - c.rope_dim).abs()}, -1);
  const double eps = std::numeric_limits<float>::epsilon();
  const double af = std::max(1.0, c.rope_scaling.attention_factor);
  const at::Tensor bound = pair_mag.to(at::kDouble) * (2 * eps * af);
  const at::Tensor err = (got.to(at::kDouble) - want).abs();
  EXPECT_TRUE((err <= bound).all().item<bool>())
      << what << ": largest error " << err.max().item<double>()
      << " against a bound of " << bound.max().item<double>();
  // It does rotate: positions past 0 move the rotated dims.
  EXPECT_GT((got - x).abs().max().item<float>(), 0.1f) << what;
}

TEST(Rope, Float32LoopRotatesAsTheFloat64ExpressionWithinRounding) {
  const at::Tensor shared = at::tensor({0, 1, 7, 4095, 100000}, at::kLong);
  const at::Tensor per_sequence =
      at::tensor({3, 9, 20000, 5}, at::kLong).view({2, 2});
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kAdjacent}) {
    const std::string name =
        layout == RopeLayout::kAdjacent ? "adjacent" : "half-split";
    ExpectRotatesWithinRounding(RopeConfig(64, 64, layout), shared, 2, name);
    ExpectRotatesWithinRounding(RopeConfig(64, 64, layout), per_sequence, 2,
                                name + ", positions per sequence");
    ExpectRotatesWithinRounding(RopeConfig(80, 48, layout), shared, 1,
                                name + ", partial rotary dims");
    ModelConfig partial_mode = RopeConfig(64, 64, layout);
    partial_mode.kv.rope_mode = RopeMode::kPartial;
    partial_mode.kv.rope_planes_kept = 5;
    ExpectRotatesWithinRounding(partial_mode, shared, 1,
                                name + ", partial RoPE mode");
    ModelConfig yarn = RopeConfig(64, 64, layout);
    yarn.rope_scaling.type = RopeScalingType::kYarn;
    yarn.rope_scaling.factor = 4;
    yarn.rope_scaling.original_max_position_embeddings = 4096;
    yarn.rope_scaling.attention_factor = 1.1386;
    ExpectRotatesWithinRounding(yarn, shared, 1,
                                name + ", yarn with attention factor");
  }
}

// RotatePairs' float32 loop (every decode step's plane-mode latents) against
// the float64 expression: heads selecting different planes, position-free
// planes (left alone), an odd last coordinate, yarn's attention factor.
TEST(Rope, Float32LoopRotatesPairsAsTheFloat64ExpressionWithinRounding) {
  const at::Tensor positions = at::tensor({0, 1, 7, 4095, 100000}, at::kLong);
  ModelConfig plain = RopeConfig(64, 48, RopeLayout::kAdjacent);
  ModelConfig yarn = RopeConfig(64, 64, RopeLayout::kHalfSplit);
  yarn.rope_scaling.type = RopeScalingType::kYarn;
  yarn.rope_scaling.factor = 4;
  yarn.rope_scaling.original_max_position_embeddings = 4096;
  yarn.rope_scaling.attention_factor = 1.1386;
  for (const ModelConfig& c : {plain, yarn}) {
    const Rope rope(c);
    // Three heads, three pairs each, and a last coordinate of no pair; plane
    // 30 is position-free under `plain` (24 rotation planes of 32).
    const at::Tensor planes =
        at::tensor({0, 5, 23, 1, 2, 3, 30, 17, 9}, at::kLong).view({3, 3});
    at::manual_seed(5);
    const at::Tensor z = at::randn({2, 5, 3, 7}, at::kFloat) * 4;
    const at::Tensor got = rope.RotatePairs(z, positions, planes);
    const at::Tensor want =
        rope.RotatePairs(z.to(at::kDouble), positions, planes);
    ASSERT_EQ(got.sizes(), z.sizes());
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const at::Tensor pairs = z.narrow(-1, 0, 6).abs().unflatten(-1, {3, 2});
    const at::Tensor magnitude =
        at::cat({pairs.sum(-1, true).expand({2, 5, 3, 3, 2}).flatten(-2),
                 z.narrow(-1, 6, 1).abs()},
                -1);
    const double eps = std::numeric_limits<float>::epsilon();
    const double af = std::max(1.0, c.rope_scaling.attention_factor);
    const at::Tensor bound = magnitude.to(at::kDouble) * (2 * eps * af);
    const at::Tensor err = (got.to(at::kDouble) - want).abs();
    EXPECT_TRUE((err <= bound).all().item<bool>())
        << "largest error " << err.max().item<double>() << " against "
        << bound.max().item<double>();
    EXPECT_TRUE(got.narrow(-1, 6, 1).equal(z.narrow(-1, 6, 1)));
    EXPECT_GT((got - z).abs().max().item<float>(), 0.1f);
    // Per-sequence positions [B, T] (a batched step's rows, each at its own
    // position): each sequence exactly as if rotated alone, by the loop and
    // by the float64 expression.
    const at::Tensor per_sequence = at::stack({positions, positions.flip(0)});
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      const at::Tensor zd = z.to(dtype);
      const at::Tensor both = rope.RotatePairs(zd, per_sequence, planes);
      for (int64_t b = 0; b < 2; ++b) {
        EXPECT_TRUE(both[b].equal(
            rope.RotatePairs(zd.narrow(0, b, 1), per_sequence[b], planes)[0]))
            << "sequence " << b
            << (dtype == at::kFloat ? ", float32" : ", float64");
      }
    }
  }
  // A position-free plane does not turn at all.
  const at::Tensor z = at::randn({1, 5, 3, 7}, at::kFloat);
  const at::Tensor free =
      Rope(plain)
          .RotatePairs(z, positions,
                       at::tensor({0, 5, 23, 1, 2, 3, 30, 17, 9}, at::kLong)
                           .view({3, 3}))
          .select(2, 2)
          .narrow(-1, 0, 2);
  EXPECT_TRUE(free.equal(z.select(2, 2).narrow(-1, 0, 2)));
}

}  // namespace
}  // namespace lrkv
