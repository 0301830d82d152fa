// The decode kernels for any x86-64 CPU (fallback when AVX2/FMA are missing).
#define LRKV_KERNEL_NS generic
#include "kernels/decode_impl.h"
