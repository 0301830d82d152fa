// A named, typed, shaped view of tensor bytes held by a checkpoint file.
#ifndef LRKV_FORMATS_TENSOR_VIEW_H_
#define LRKV_FORMATS_TENSOR_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace lrkv {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  // Row-major shape, outermost dimension first (PyTorch order).
  std::vector<int64_t> shape;
  // Little-endian element bytes; valid while the owning reader lives.
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// "[64, 512]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace lrkv

#endif  // LRKV_FORMATS_TENSOR_VIEW_H_
