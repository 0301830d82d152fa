// WeightMatVec built for the generic target (see weight_matvec_impl.h).
#define LRKV_MATVEC_NS generic
#include "kernels/weight_matvec_impl.h"
