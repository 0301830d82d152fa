// The OpenBLAS core-type check: the rule that maps OpenBLAS's choice and the CPU's
// instruction sets to a better core, and, through the lrkv binary, that the core in
// force is never below what this CPU runs unless the user asked for it.
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "runtime/blas_core.h"

namespace lrkv {
namespace {

TEST(BlasCore, ALesserCoreIsReplacedByTheBestTheCpuRuns) {
  CpuIsa sapphire;  // AVX-512 with BF16 (the Xeon OpenBLAS 0.3.21 does not recognise)
  sapphire.avx = sapphire.avx2 = sapphire.fma = sapphire.avx512 = sapphire.avx512_bf16 = true;
  CpuIsa skylake = sapphire;
  skylake.avx512_bf16 = false;
  CpuIsa haswell;
  haswell.avx = haswell.avx2 = haswell.fma = true;
  EXPECT_EQ(BetterOpenBlasCore("Prescott", sapphire), "Cooperlake");
  EXPECT_EQ(BetterOpenBlasCore("Haswell", skylake), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("Sandybridge", haswell), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("ZEN", skylake), "SkylakeX");  // names are case-blind
  // Right already, or nothing better to ask for.
  EXPECT_EQ(BetterOpenBlasCore("SkylakeX", sapphire), "");
  EXPECT_EQ(BetterOpenBlasCore("Cooperlake", sapphire), "");
  EXPECT_EQ(BetterOpenBlasCore("Haswell", haswell), "");
  EXPECT_EQ(BetterOpenBlasCore("Prescott", CpuIsa{}), "");
  EXPECT_EQ(BetterOpenBlasCore("NoSuchCore", sapphire), "");  // unknown: leave it
  EXPECT_EQ(BetterOpenBlasCore("", sapphire), "");            // not OpenBLAS
}

std::string Output(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(command.c_str(), "r"), pclose);
  std::array<char, 256> buf;
  while (p && fgets(buf.data(), buf.size(), p.get()) != nullptr) out += buf.data();
  return out;
}

std::string BlasLine(const std::string& sysinfo) {
  const auto at = sysinfo.find("blas core: ");
  if (at == std::string::npos) return "";
  const auto end = sysinfo.find('\n', at);
  return sysinfo.substr(at + 11, end - at - 11);
}

TEST(BlasCore, TheLrkvBinaryRunsTheBestCoreUnlessTheUserChoseOne) {
  const std::string line = BlasLine(Output(std::string("env -u OPENBLAS_CORETYPE ") + LRKV_BIN +
                                        " sysinfo"));
  ASSERT_FALSE(line.empty());
  if (line == "(not OpenBLAS)") GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  const std::string core = line.substr(0, line.find(' '));
  EXPECT_EQ(BetterOpenBlasCore(core, DetectCpuIsa()), "") << "OpenBLAS runs " << line;
  // An explicit OPENBLAS_CORETYPE is the user's and stays.
  EXPECT_EQ(BlasLine(Output(std::string("OPENBLAS_CORETYPE=Prescott ") + LRKV_BIN + " sysinfo")),
            "Prescott (OPENBLAS_CORETYPE)");
}

}  // namespace
}  // namespace lrkv
