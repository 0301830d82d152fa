// The decode kernels built with AVX-512 (this file gets -mavx512f -mavx512bw
// -mfma).
#define LRKV_KERNEL_NS avx512
#include "kernels/decode_impl.h"
