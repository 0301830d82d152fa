// The free-support LRKV step in the heads' Gram coordinates against the same
// alternation computed plainly on the heads, in float64: the residual Grams
// formed from W̃_h − S, their eigenvectors, the S-step solved from
// S·Σ_hE_h = Σ_hW̃_hE_h, the objective from the residual itself.
#include "surgery/lrkv_gram_step.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/model_test_util.h"

namespace lrkv {
namespace {

using testing::MaxRelError;

struct PlainStep {
  at::Tensor shared;  // S after the step [k, d_h]
  at::Tensor proj;    // P_h = B_hB_hᵀ [H, d_h, d_h]
  double objective = 0, gauged = 0;
};

// One alternation from S on the heads W̃ [H, k, d_h], in the dtype of `wt`.
PlainStep PlainAlternation(const at::Tensor& wt, const at::Tensor& from,
                           int64_t r, double eps) {
  const int64_t h = wt.size(0), dh = wt.size(2);
  const at::Tensor residual = wt - from;
  const at::Tensor g = at::matmul(residual.transpose(1, 2), residual);
  const at::Tensor b = std::get<1>(at::linalg_eigh(g)).narrow(2, dh - r, r);
  PlainStep out;
  out.proj = at::matmul(b, b.transpose(1, 2));
  const at::Tensor e = at::eye(dh, wt.options()) - (1 - eps) * out.proj;
  // S·Σ_hE_h = Σ_hW̃_hE_h (Σ_hE_h symmetric).
  out.shared = at::linalg_solve(e.sum(0), at::matmul(wt, e).sum(0).t()).t();
  const at::Tensor left = wt - out.shared;
  const at::Tensor u = at::matmul(left, b);
  const at::Tensor err = left - at::matmul(u, b.transpose(1, 2));
  out.objective = err.pow(2).sum().item<double>();
  out.gauged = out.objective + eps * u.pow(2).sum().item<double>();
  return out;
}

// H = 4, d_h = 16: k = 96 rows (the heads' span is smaller than k, as after
// the reduction to it) and k = 48 (K singular, as in MHA with H·d_h > d).
class GramStepTest : public ::testing::TestWithParam<int64_t> {};

// Random whitened heads [H, k, d_h] at a seed, their Gram, options at a rank.
struct RandomHeads {
  static constexpr int64_t h = 4, dh = 16;
  RandomHeads(uint64_t seed, int64_t k, int64_t rank)
      : wt((at::manual_seed(seed), at::randn({h, k, dh}, at::kDouble))),
        heads(wt) {
    opt.rank = rank;
  }
  at::Tensor wt;
  HeadGram heads;
  LrkvDecompositionOptions opt;
};

TEST_P(GramStepTest, Float64StepIsThePlainAlternation) {
  const int64_t r = 5;
  const RandomHeads x(5, GetParam(), r);
  const at::Tensor& wt = x.wt;
  const GramStep step(x.heads, at::Tensor(), x.opt, at::kDouble);
  // From the mean, then from that step's S (a state built by the step
  // itself), each against the plain step from the same S.
  at::Tensor state = step.StateOf(step.MeanCoefficients());
  at::Tensor shared = wt.mean(0);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    ASSERT_LT(MaxRelError(step.SharedOf(state), shared), 1e-12);
    const PlainStep plain = PlainAlternation(wt, shared, r, x.opt.gauge);
    const Point p = step.Step(state);
    // Doubles, algebraically equal: rounding times A's condition (≤ 1/ε).
    EXPECT_LT(MaxRelError(step.SharedOf(p.s), plain.shared), 1e-10);
    EXPECT_LT(MaxRelError(at::matmul(p.b, p.b.transpose(1, 2)), plain.proj),
              1e-10);
    EXPECT_NEAR(p.objective, plain.objective, 1e-10 * plain.objective);
    EXPECT_NEAR(p.gauged, plain.gauged, 1e-10 * plain.gauged);
    state = p.s;
    shared = plain.shared;
  }
}

TEST_P(GramStepTest, CoefficientsReproduceAnSInTheHeadsSpan) {
  const RandomHeads x(6, GetParam(), 3);
  const GramStep step(x.heads, at::Tensor(), x.opt, at::kDouble);
  const at::Tensor shared =
      at::matmul(x.heads.cols, at::randn({x.h * x.dh, x.dh}, at::kDouble));
  const at::Tensor c = step.CoefficientsOf(shared);
  EXPECT_LT(MaxRelError(step.SharedOf(step.StateOf(c)), shared), 1e-8);
}

// The float32 step's S is as close to the float64 plain step's as the plain
// step computed in float32 is, within 4×.
TEST_P(GramStepTest, Float32StepErrsAsThePlainStepInFloat32) {
  const int64_t r = 5;
  const RandomHeads x(7, GetParam(), r);
  const at::Tensor& wt = x.wt;
  const LrkvDecompositionOptions& opt = x.opt;
  const GramStep fast(x.heads, at::Tensor(), opt, at::kFloat);
  const at::Tensor shared = wt.mean(0);
  const PlainStep ref = PlainAlternation(wt, shared, r, opt.gauge);
  const PlainStep plain32 =
      PlainAlternation(wt.to(at::kFloat), shared.to(at::kFloat), r, opt.gauge);
  const Point p = fast.Step(fast.StateOf(fast.MeanCoefficients()));
  const double plain_err =
      MaxRelError(plain32.shared.to(at::kDouble), ref.shared);
  ASSERT_GT(plain_err, 0);
  EXPECT_LE(MaxRelError(fast.SharedOf(p.s), ref.shared), 4 * plain_err);
  EXPECT_NEAR(p.objective, ref.objective, 1e-5 * ref.objective);
}

INSTANTIATE_TEST_SUITE_P(Rows, GramStepTest, ::testing::Values(96, 48));

}  // namespace
}  // namespace lrkv
