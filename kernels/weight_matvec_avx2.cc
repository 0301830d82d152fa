// WeightMatVec built for the avx2 target (see weight_matvec_impl.h).
#define LRKV_MATVEC_NS avx2
#include "kernels/weight_matvec_impl.h"
