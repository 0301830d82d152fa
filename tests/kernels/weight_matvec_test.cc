// WeightMatVec against its float64 reference for bf16, f16 and fp32 weights,
// fp32 and fp64 activations, every ISA build this CPU runs, odd shapes and
// batches. The tolerance is the textbook bound of a dot product summed in any
// order, n·u·Σ|w x| (u: the unit roundoff of the accumulation dtype), plus the
// final rounding: it holds on every CPU and is far below what a wrong weight or
// a dropped term costs.
#include "kernels/weight_matvec.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "gtest/gtest.h"
#include "kernels/decode_attention.h"

namespace lrkv::kernels {
namespace {

struct Matrix {
  std::vector<uint16_t> half;
  std::vector<float> f32;
  std::vector<double> value;  // the stored values, exactly
};

Matrix RandomMatrix(WeightDType dtype, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  Matrix m;
  for (int64_t i = 0; i < n; ++i) {
    // Mixed magnitudes (and f16 subnormals) so that widening is tested, not
    // just rounding.
    float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
    if (dtype == WeightDType::kF16 && i % 97 == 0)
      v = 3e-6f;  // subnormal in f16
    if (dtype == WeightDType::kBF16) {
      m.half.push_back(FloatToBFloat16(v));
      m.value.push_back(BFloat16ToFloat(m.half.back()));
    } else if (dtype == WeightDType::kF16) {
      m.half.push_back(FloatToHalf(v));
      m.value.push_back(HalfToFloat(m.half.back()));
    } else {
      m.f32.push_back(v);
      m.value.push_back(v);
    }
  }
  return m;
}

class WeightMatVecTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ForceKernelIsa(GetParam()); }
  void TearDown() override { ForceKernelIsa(""); }
};

TEST_P(WeightMatVecTest, MatchesTheReferenceWithinTheSummationBound) {
  struct Shape {
    int64_t rows, cols, batch;
  };
  for (WeightDType dtype :
       {WeightDType::kBF16, WeightDType::kF16, WeightDType::kF32}) {
    for (const Shape s : {Shape{1, 1, 1}, Shape{37, 53, 3}, Shape{300, 1000, 1},
                          Shape{513, 640, 9}, Shape{70, 97, 15},
                          Shape{64, 1030, 2}, Shape{33, 8, 6}}) {
      for (bool f64 : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "dtype " << static_cast<int>(dtype) << " shape "
                     << s.rows << "x" << s.cols << " batch " << s.batch
                     << (f64 ? " fp64" : " fp32"));
        const Matrix w = RandomMatrix(dtype, s.rows * s.cols, 7 + s.cols);
        std::mt19937 rng(11);
        std::normal_distribution<double> normal(0, 1);
        std::vector<float> x(s.batch * s.cols), y(s.batch * s.rows),
            yref(s.batch * s.rows);
        std::vector<double> x64(s.batch * s.cols), y64(s.batch * s.rows),
            y64ref(s.batch * s.rows);
        for (size_t i = 0; i < x.size(); ++i)
          x64[i] = x[i] = static_cast<float>(normal(rng));
        WeightMatVecParams p;
        p.dtype = dtype;
        p.w = dtype == WeightDType::kF32
                  ? static_cast<const void*>(w.f32.data())
                  : w.half.data();
        p.rows = s.rows;
        p.cols = s.cols;
        p.batch = s.batch;
        WeightMatVecParams ref = p;
        if (f64) {
          p.x64 = ref.x64 = x64.data();
          p.y64 = y64.data();
          ref.y64 = y64ref.data();
        } else {
          p.x = ref.x = x.data();
          p.y = y.data();
          ref.y = yref.data();
        }
        ASSERT_TRUE(WeightMatVec(p).ok());
        ASSERT_TRUE(WeightMatVecReference(ref).ok());
        const double u = f64 ? 0x1p-53 : 0x1p-24;
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t o = 0; o < s.rows; ++o) {
            double abs_sum = 0, exact = 0;
            for (int64_t i = 0; i < s.cols; ++i) {
              const double t = w.value[o * s.cols + i] * x64[b * s.cols + i];
              abs_sum += std::abs(t);
              exact += t;
            }
            const double got = f64 ? y64[b * s.rows + o] : y[b * s.rows + o];
            const double bound =
                (s.cols + 1) * u * abs_sum + u * std::abs(exact);
            ASSERT_LE(std::abs(got - exact), bound)
                << "row " << o << " batch " << b;
            const double want =
                f64 ? y64ref[b * s.rows + o] : yref[b * s.rows + o];
            ASSERT_LE(std::abs(want - exact), bound) << "reference, row " << o;
          }
        }
      }
    }
  }
}

// bf16 activations: x rounded to bf16, the products summed in fp32 (the
// AVX512-BF16 dot product where the CPU has it, the exact kernel on the rounded
// x elsewhere). Within the summation bound of the rounded x's products, and
// not of the unrounded x's: the rounding is really there.
TEST_P(WeightMatVecTest, Bf16ActivationsRoundXAndSumInFp32) {
  struct Shape {
    int64_t rows, cols, batch;
  };
  int64_t outside_exact_bound = 0;
  for (const Shape s :
       {Shape{1, 1, 1}, Shape{37, 53, 3}, Shape{300, 1000, 2},
        Shape{513, 640, 9}, Shape{70, 97, 15}, Shape{64, 1024, 8},
        Shape{33, 31, 4}, Shape{8, 200, 16}}) {
    SCOPED_TRACE(::testing::Message() << "shape " << s.rows << "x" << s.cols
                                      << " batch " << s.batch);
    const Matrix w =
        RandomMatrix(WeightDType::kBF16, s.rows * s.cols, 3 + s.cols);
    std::mt19937 rng(5);
    std::normal_distribution<double> normal(0, 1);
    std::vector<float> x(s.batch * s.cols), y(s.batch * s.rows),
        yref(s.batch * s.rows);
    for (float& v : x) v = static_cast<float>(normal(rng));
    WeightMatVecParams p;
    p.dtype = WeightDType::kBF16;
    p.w = w.half.data();
    p.rows = s.rows;
    p.cols = s.cols;
    p.batch = s.batch;
    p.bf16_activations = true;
    p.x = x.data();
    WeightMatVecParams ref = p;
    p.y = y.data();
    ref.y = yref.data();
    ASSERT_TRUE(WeightMatVec(p).ok());
    ASSERT_TRUE(WeightMatVecReference(ref).ok());
    const double u = 0x1p-24;
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t o = 0; o < s.rows; ++o) {
        double abs_sum = 0, exact = 0, unrounded = 0;
        for (int64_t i = 0; i < s.cols; ++i) {
          const double xi = x[b * s.cols + i];
          const double t = w.value[o * s.cols + i] *
                           BFloat16ToFloat(FloatToBFloat16(x[b * s.cols + i]));
          abs_sum += std::abs(t);
          exact += t;
          unrounded += w.value[o * s.cols + i] * xi;
        }
        const double bound = (s.cols + 1) * u * abs_sum + u * std::abs(exact);
        const double got = y[b * s.rows + o];
        ASSERT_LE(std::abs(got - exact), bound)
            << "row " << o << " batch " << b;
        ASSERT_LE(std::abs(yref[b * s.rows + o] - exact), bound)
            << "reference, row " << o;
        if (std::abs(got - unrounded) > bound) ++outside_exact_bound;
      }
    }
  }
  EXPECT_GT(outside_exact_bound, 100);
}

TEST_P(WeightMatVecTest, BadParametersAreRejected) {
  std::vector<float> x(4), y(4);
  std::vector<double> x64(4), y64(4);
  std::vector<uint16_t> w(16);
  WeightMatVecParams p;
  p.w = w.data();
  p.rows = p.cols = 4;
  p.batch = 1;
  EXPECT_EQ(WeightMatVec(p).code(),
            absl::StatusCode::kInvalidArgument);  // no x/y
  p.x = x.data();
  p.y = y.data();
  EXPECT_TRUE(WeightMatVec(p).ok());
  p.y64 = y64.data();
  p.x64 = x64.data();
  EXPECT_EQ(WeightMatVec(p).code(),
            absl::StatusCode::kInvalidArgument);  // both
  p.x64 = nullptr;
  p.y64 = nullptr;
  p.cols = 0;
  EXPECT_EQ(WeightMatVec(p).code(), absl::StatusCode::kInvalidArgument);
  // bf16 activations need bf16 W and fp32 x.
  p.cols = 4;
  p.bf16_activations = true;
  p.x = nullptr;
  p.y = nullptr;
  p.x64 = x64.data();
  p.y64 = y64.data();
  EXPECT_EQ(WeightMatVec(p).code(), absl::StatusCode::kInvalidArgument);
  p.x64 = nullptr;
  p.y64 = nullptr;
  p.x = x.data();
  p.y = y.data();
  EXPECT_TRUE(WeightMatVec(p).ok());
  p.dtype = WeightDType::kF16;
  EXPECT_EQ(WeightMatVec(p).code(), absl::StatusCode::kInvalidArgument);
}

std::vector<const char*> Isas() {
  std::vector<const char*> isas = {"generic"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    isas.push_back("avx2");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
      isas.push_back("avx512");
  }
  return isas;
}

INSTANTIATE_TEST_SUITE_P(Isas, WeightMatVecTest, ::testing::ValuesIn(Isas()),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace lrkv::kernels
