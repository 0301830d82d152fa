// Writes GGUF v3 files: typed metadata and F32/F16/BF16 (or Q8_0/Q4_K/Q6_K) tensors, aligned as llama.cpp
// expects, through a temporary file renamed into place. The inverse of gguf.h.
#ifndef LRKV_FORMATS_GGUF_WRITER_H_
#define LRKV_FORMATS_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "formats/tensor_view.h"

namespace lrkv {

class GgufBuilder {
 public:
  void AddString(const std::string& key, const std::string& value);
  void AddUint32(const std::string& key, uint32_t value);
  void AddFloat32(const std::string& key, float value);
  void AddBool(const std::string& key, bool value);
  void AddStrings(const std::string& key, const std::vector<std::string>& values);
  void AddFloat32s(const std::string& key, const std::vector<float>& values);
  void AddInt32s(const std::string& key, const std::vector<int32_t>& values);
  // `tensor.data` must stay valid until Write; F32, F16, BF16, Q8_0, Q4_K or Q6_K.
  void AddTensor(const TensorView& tensor);
  // The tensors added so far, in file order (a caller may re-encode them before Write).
  std::vector<TensorView>& tensors() { return tensors_; }

  // InvalidArgument for duplicate keys or tensor names, unsupported dtypes or sizes
  // that disagree with the shape; PermissionDenied / Internal for I/O failures.
  absl::Status Write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, std::string>> metadata_;  // key, encoded type+value
  std::vector<TensorView> tensors_;
};

}  // namespace lrkv

#endif  // LRKV_FORMATS_GGUF_WRITER_H_
