// The decode kernels built with AVX2 + FMA (this file gets -mavx2 -mfma
// -mf16c).
#define LRKV_KERNEL_NS avx2
#include "kernels/decode_impl.h"
