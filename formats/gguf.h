// GGUF (v2/v3) checkpoints: a validating parser of metadata and tensor infos.
// F32, F16, BF16 tensors and the block types Q8_0, Q4_K, Q6_K (dequantized on load) are
// accepted; other quantized types are rejected by name.
#ifndef LRKV_FORMATS_GGUF_H_
#define LRKV_FORMATS_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "formats/mapped_file.h"
#include "formats/tensor_view.h"

namespace lrkv {

// One metadata value. Arrays of scalars or strings; nested arrays are rejected.
struct GgufValue {
  using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;
  Scalar scalar;
  std::vector<Scalar> array;
  bool is_array = false;
  uint32_t type = 0;  // GGUF value type id (array: the element type)

  bool is_string() const { return !is_array && std::holds_alternative<std::string>(scalar); }
};

struct GgufContents {
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::map<std::string, GgufValue> metadata;
  // Tensor shapes are in PyTorch order (GGUF lists dims innermost first).
  std::vector<TensorView> tensors;
};

// Parses and validates a whole GGUF file held in `file`. Every failure is
// InvalidArgument with a message naming the problem (and the key or tensor).
absl::StatusOr<GgufContents> ParseGguf(absl::Span<const uint8_t> file);

// The dtype of a ggml tensor type id lrkv reads, and back; nullopt for the others.
std::optional<DType> DTypeOfGgmlType(uint32_t type);
std::optional<uint32_t> GgmlTypeOfDType(DType dtype);

// The name of a ggml tensor type id ("Q4_K"), or "type N" when unknown.
std::string GgmlTypeName(uint32_t type);

// Typed metadata accessors: NotFound when absent, InvalidArgument on a type mismatch.
absl::StatusOr<uint64_t> GgufUint(const GgufContents& g, const std::string& key);
absl::StatusOr<double> GgufFloat(const GgufContents& g, const std::string& key);
absl::StatusOr<std::string> GgufString(const GgufContents& g, const std::string& key);
absl::StatusOr<bool> GgufBool(const GgufContents& g, const std::string& key);

// A memory-mapped GGUF file and its parsed contents.
class GgufReader {
 public:
  static absl::StatusOr<std::unique_ptr<GgufReader>> Open(const std::string& path);
  const GgufContents& contents() const { return contents_; }
  const std::string& path() const { return file_->path(); }

 private:
  GgufReader(std::unique_ptr<MappedFile> file, GgufContents contents)
      : file_(std::move(file)), contents_(std::move(contents)) {}
  std::unique_ptr<MappedFile> file_;
  GgufContents contents_;
};

}  // namespace lrkv

#endif  // LRKV_FORMATS_GGUF_H_
