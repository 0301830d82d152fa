// The OpenBLAS core-type check (see blas_core.h).
#include "runtime/blas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/ascii.h"

namespace lrkv {
namespace {

// Instruction-set level of each x86-64 core of OpenBLAS's DYNAMIC_ARCH list: 0 SSE,
// 1 AVX, 2 AVX2/FMA, 3 AVX-512.
int CoreLevel(const std::string& name) {
  static const std::map<std::string, int> levels = {
      {"prescott", 0},    {"core2", 0},       {"penryn", 0},     {"dunnington", 0},
      {"nehalem", 0},     {"atom", 0},        {"opteron", 0},    {"opteron_sse3", 0},
      {"barcelona", 0},   {"bobcat", 0},      {"katmai", 0},     {"coppermine", 0},
      {"northwood", 0},   {"banias", 0},      {"sandybridge", 1}, {"bulldozer", 1},
      {"piledriver", 1},  {"steamroller", 1}, {"excavator", 1},  {"haswell", 2},
      {"zen", 2},         {"skylakex", 3},    {"cooperlake", 3}, {"sapphirerapids", 3}};
  auto it = levels.find(absl::AsciiStrToLower(name));
  return it == levels.end() ? -1 : it->second;
}

}  // namespace

CpuIsa DetectCpuIsa() {
  CpuIsa c;
  c.avx = __builtin_cpu_supports("avx");
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#if defined(__GNUC__) && __GNUC__ >= 12
  c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return c;
}

std::string BetterOpenBlasCore(const std::string& chosen, const CpuIsa& cpu) {
  const int level = CoreLevel(chosen);
  if (level < 0) return "";
  if (cpu.avx512 && level < 3) return cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (cpu.avx2 && cpu.fma && level < 2) return "Haswell";
  if (cpu.avx && level < 1) return "Sandybridge";
  return "";
}

std::string OpenBlasCore() {
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name != nullptr ? name : "";
}

void UseBestOpenBlasCore(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice stands
  const std::string better = BetterOpenBlasCore(OpenBlasCore(), DetectCpuIsa());
  if (better.empty()) return;
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Still here: the re-exec failed; carry on with the slower kernels.
  std::fprintf(stderr, "lrkv: note: OpenBLAS uses its %s kernels on this CPU (re-exec with "
                       "OPENBLAS_CORETYPE=%s failed)\n",
               OpenBlasCore().c_str(), better.c_str());
}

}  // namespace lrkv
