// CUDA versions of the decode-step kernels (MHA/GQA and factored LRKV / MLA). Same
// parameter structs as the CPU kernels, with every buffer in device memory; split over
// positions (flash-decoding), each block stages tiles of K/V (or the factored
// segments) in shared memory, one pass with an online softmax, then a merge kernel.
// Built only when CMake finds nvcc; tests named *_CUDA skip without a GPU.
#ifndef LRKV_KERNELS_CUDA_DECODE_ATTENTION_CUDA_H_
#define LRKV_KERNELS_CUDA_DECODE_ATTENTION_CUDA_H_

#include "absl/status/status.h"
#include "kernels/decode_params.h"

namespace lrkv::kernels::cuda {

// True when a CUDA device is present and usable.
bool DeviceAvailable();

// Device pointers in `p`. The reconstruct fields of FactoredDecodeParams are not
// supported here (InvalidArgument).
absl::Status MhaDecodeCuda(const MhaDecodeParams& p);
absl::Status FactoredDecodeCuda(const FactoredDecodeParams& p);

}  // namespace lrkv::kernels::cuda

#endif  // LRKV_KERNELS_CUDA_DECODE_ATTENTION_CUDA_H_
