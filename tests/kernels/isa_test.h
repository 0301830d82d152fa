// A kernel test run once per implementation this CPU can run: the best one,
// AVX2 and generic (ForceKernelIsa caps the entry points' choice).
#ifndef LRKV_TESTS_KERNELS_ISA_TEST_H_
#define LRKV_TESTS_KERNELS_ISA_TEST_H_

#include <string>

#include "gtest/gtest.h"
#include "kernels/decode_attention.h"

namespace lrkv::kernels::testing {

class IsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ForceKernelIsa(GetParam()); }
  void TearDown() override { ForceKernelIsa(""); }
};

inline std::string IsaTestName(
    const ::testing::TestParamInfo<std::string>& info) {
  return info.param.empty() ? std::string("best") : info.param;
}

}  // namespace lrkv::kernels::testing

// Instantiates the IsaTest subclass `fixture` for every implementation.
#define LRKV_INSTANTIATE_ISA_TESTS(fixture)                          \
  INSTANTIATE_TEST_SUITE_P(Isa, fixture,                             \
                           ::testing::Values("", "avx2", "generic"), \
                           ::lrkv::kernels::testing::IsaTestName)

#endif  // LRKV_TESTS_KERNELS_ISA_TEST_H_
