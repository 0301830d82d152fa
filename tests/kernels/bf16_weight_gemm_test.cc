// Bf16WeightGemm (oneDNN) against its float64 reference on odd shapes and batches.
// Both multiply the same bf16-rounded activations by the same bf16 weights, so the
// products are exact in fp32 and only the summation differs: the tolerance is the
// textbook bound of an fp32 dot product summed in any order, n·u·Σ|w x|, plus the final
// rounding — it holds on every CPU, and a wrong weight, a dropped term or unrounded
// activations cost far more than it.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/bf16_weight_gemm.h"
#include "base/dtype.h"

namespace lrkv::kernels {
namespace {

TEST(Bf16WeightGemmTest, MatchesTheReferenceWithinTheSummationBound) {
  if (!Bf16WeightGemmAvailable()) GTEST_SKIP() << "no native bf16 matmul on this CPU";
  struct Shape {
    int64_t rows, cols, batch;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{37, 53, 3}, Shape{300, 1000, 17},
                        Shape{513, 640, 64}, Shape{64, 2048, 170}}) {
    SCOPED_TRACE(::testing::Message() << "shape " << s.rows << "x" << s.cols << " batch "
                                      << s.batch);
    std::mt19937 rng(7 + s.cols);
    std::normal_distribution<float> normal(0, 1);
    std::vector<uint16_t> w(s.rows * s.cols);
    for (auto& v : w) v = FloatToBFloat16(normal(rng) * std::ldexp(1.0f, rng() % 9 - 4));
    std::vector<float> x(s.batch * s.cols), y(s.batch * s.rows), yref(s.batch * s.rows);
    for (auto& v : x) v = normal(rng);
    Bf16WeightGemmParams p;
    p.w = w.data();
    p.rows = s.rows;
    p.cols = s.cols;
    p.batch = s.batch;
    p.x = x.data();
    p.y = y.data();
    Bf16WeightGemmParams ref = p;
    ref.y = yref.data();
    ASSERT_TRUE(Bf16WeightGemm(p).ok());
    ASSERT_TRUE(Bf16WeightGemmReference(ref).ok());
    const double u = 0x1p-24;
    double unrounded_err = 0, rounded_err = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t o = 0; o < s.rows; ++o) {
        double abs_sum = 0, exact = 0, unrounded = 0;
        for (int64_t i = 0; i < s.cols; ++i) {
          const double wi = BFloat16ToFloat(w[o * s.cols + i]);
          const double xi = x[b * s.cols + i];
          const double t = wi * BFloat16ToFloat(FloatToBFloat16(x[b * s.cols + i]));
          abs_sum += std::abs(t);
          exact += t;
          unrounded += wi * xi;
        }
        const double got = y[b * s.rows + o];
        const double bound = (s.cols + 1) * u * abs_sum + u * std::abs(exact);
        ASSERT_LE(std::abs(got - exact), bound) << "row " << o << " batch " << b;
        ASSERT_LE(std::abs(yref[b * s.rows + o] - exact), bound) << "reference, row " << o;
        rounded_err += std::abs(got - exact);
        unrounded_err += std::abs(got - unrounded);
      }
    }
    // The activations really are rounded to bf16: the product is far nearer the rounded
    // one than the fp32 one (bf16's 2^-9 against fp32 summation's 2^-24 per term).
    if (s.cols > 1) EXPECT_LT(rounded_err * 10, unrounded_err);
  }
}

TEST(Bf16WeightGemmTest, BadParametersAreRejected) {
  std::vector<float> x(4), y(4);
  std::vector<uint16_t> w(16);
  Bf16WeightGemmParams p;
  p.w = w.data();
  p.rows = p.cols = 4;
  p.batch = 1;
  EXPECT_EQ(Bf16WeightGemm(p).code(), absl::StatusCode::kInvalidArgument);  // no x/y
  EXPECT_EQ(Bf16WeightGemmReference(p).code(), absl::StatusCode::kInvalidArgument);
  p.x = x.data();
  p.y = y.data();
  p.batch = 0;
  EXPECT_EQ(Bf16WeightGemm(p).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lrkv::kernels
