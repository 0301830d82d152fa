// Debian's OpenBLAS is a DYNAMIC_ARCH build that picks its kernels for the CPU when
// it loads. On CPUs it does not recognise (an AVX-512 Sapphire Rapids Xeon, under
// 0.3.21) it falls back to its "Prescott" SSE kernels, which ran eval 3.3x slower
// than the SkylakeX kernels on that machine. OpenBLAS reads OPENBLAS_CORETYPE only at
// load time, so the fix is to set it and re-execute before any work is done.
#ifndef LRKV_RUNTIME_BLAS_CORE_H_
#define LRKV_RUNTIME_BLAS_CORE_H_

#include <string>

namespace lrkv {

struct CpuIsa {
  bool avx = false, avx2 = false, fma = false;
  // AVX-512 F, BW, VL and DQ (what OpenBLAS's SkylakeX kernels need).
  bool avx512 = false;
  bool avx512_bf16 = false;
};

// This CPU's.
CpuIsa DetectCpuIsa();

// The OpenBLAS core to ask for when `chosen` (openblas_get_corename()) uses a lesser
// instruction set than `cpu` runs; empty when the choice is right or the name unknown.
std::string BetterOpenBlasCore(const std::string& chosen, const CpuIsa& cpu);

// The core OpenBLAS runs here ("" when the BLAS in use is not OpenBLAS).
std::string OpenBlasCore();

// Call first in main(): when OPENBLAS_CORETYPE is unset and OpenBLAS chose a lesser
// core than this CPU runs, re-executes the program with OPENBLAS_CORETYPE set to the
// better one (returns only when nothing needed doing, or the re-exec failed).
void UseBestOpenBlasCore(char** argv);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_BLAS_CORE_H_
