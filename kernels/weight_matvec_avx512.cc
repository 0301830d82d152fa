// WeightMatVec built for the avx512 target (see weight_matvec_impl.h).
#define LRKV_MATVEC_NS avx512
#include "kernels/weight_matvec_impl.h"
