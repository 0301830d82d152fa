// RmsNorm's float32 loop (every decode step's norms) against the float64 ATen
// expression: each element within 4 float32 ulps of |x·s·γ| (the mean and
// rsqrt rounded once each, then x·s and ·γ), over a decode step's rows, a
// prefill chunk's (split across threads) and rows scaled from 1e-3 to 1e3;
// autograd still takes the ATen expression.
#include "runtime/rms_norm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace lrkv {
namespace {

TEST(RmsNorm, Float32LoopNormalisesWithinRoundingOfFloat64) {
  at::manual_seed(3);
  const double eps = 1e-6;
  const double ulp = std::numeric_limits<float>::epsilon() / 2;
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 8, 128}, {3, 1024}, {300, 1024}, {5, 7}};
  for (const auto& shape : shapes) {
    at::Tensor x = at::randn(shape, at::kFloat);
    // Rows of very different size: the mean must not lose the small ones.
    x = x * at::pow(10.0, at::linspace(-3, 3, x.numel() / shape.back())
                              .view({-1, 1})
                              .to(at::kFloat))
                .view(at::IntArrayRef(shape.data(), shape.size() - 1))
                .unsqueeze(-1);
    const at::Tensor gamma = at::randn({shape.back()}, at::kFloat) + 1;
    const at::Tensor got = RmsNorm(x, gamma, eps);
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const at::Tensor ref =
        RmsNorm(x.to(at::kDouble), gamma.to(at::kDouble), eps);
    const at::Tensor bound = 4 * ulp * ref.abs() + 1e-300;
    const at::Tensor excess = (got.to(at::kDouble) - ref).abs() - bound;
    EXPECT_LE(excess.max().item<double>(), 0)
        << "shape [" << shape[0] << ", ..., " << shape.back() << "]";
  }
}

TEST(RmsNorm, AutogradTakesTheAtenExpression) {
  at::Tensor x = at::randn({2, 16}, at::kFloat).requires_grad_();
  at::Tensor gamma = at::ones({16}, at::kFloat).requires_grad_();
  const at::Tensor y = RmsNorm(x, gamma, 1e-6);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  ASSERT_TRUE(x.grad().defined());
  ASSERT_TRUE(gamma.grad().defined());
  EXPECT_TRUE(at::isfinite(x.grad()).all().item<bool>());
  // Under no_grad the loop's result equals the expression's within rounding.
  at::NoGradGuard no_grad;
  const at::Tensor loop = RmsNorm(x.detach(), gamma.detach(), 1e-6);
  EXPECT_TRUE(at::allclose(loop, y.detach(), 1e-6, 0));
}

}  // namespace
}  // namespace lrkv
