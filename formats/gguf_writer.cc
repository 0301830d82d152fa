// GGUF v3 writer (see gguf_writer.h).
#include "formats/gguf_writer.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/status_macros.h"
#include "formats/block_file.h"
#include "formats/gguf.h"

namespace lrkv {
namespace {

constexpr uint64_t kAlignment = 32;
enum : uint32_t {
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9
};

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}
void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

// The encoded value of an array of `type` numbers.
template <typename T>
std::string NumberArray(uint32_t type, const std::vector<T>& values) {
  std::string v;
  Put<uint32_t>(&v, kArray);
  Put<uint32_t>(&v, type);
  Put<uint64_t>(&v, values.size());
  for (T x : values) Put(&v, x);
  return v;
}

}  // namespace

void GgufBuilder::AddString(const std::string& key, const std::string& value) {
  std::string v;
  Put<uint32_t>(&v, kString);
  PutString(&v, value);
  metadata_.emplace_back(key, std::move(v));
}

void GgufBuilder::AddUint32(const std::string& key, uint32_t value) {
  std::string v;
  Put<uint32_t>(&v, kU32);
  Put(&v, value);
  metadata_.emplace_back(key, std::move(v));
}

void GgufBuilder::AddFloat32(const std::string& key, float value) {
  std::string v;
  Put<uint32_t>(&v, kF32);
  Put(&v, value);
  metadata_.emplace_back(key, std::move(v));
}

void GgufBuilder::AddBool(const std::string& key, bool value) {
  std::string v;
  Put<uint32_t>(&v, kBool);
  Put<uint8_t>(&v, value ? 1 : 0);
  metadata_.emplace_back(key, std::move(v));
}

void GgufBuilder::AddStrings(const std::string& key,
                             const std::vector<std::string>& values) {
  std::string v;
  Put<uint32_t>(&v, kArray);
  Put<uint32_t>(&v, kString);
  Put<uint64_t>(&v, values.size());
  for (const auto& s : values) PutString(&v, s);
  metadata_.emplace_back(key, std::move(v));
}

void GgufBuilder::AddFloat32s(const std::string& key,
                              const std::vector<float>& values) {
  metadata_.emplace_back(key, NumberArray(kF32, values));
}

void GgufBuilder::AddInt32s(const std::string& key,
                            const std::vector<int32_t>& values) {
  metadata_.emplace_back(key, NumberArray(kI32, values));
}

void GgufBuilder::AddTensor(const TensorView& tensor) {
  tensors_.push_back(tensor);
}

absl::Status GgufBuilder::Write(const std::string& path) const {
  std::set<std::string> keys, names;
  for (const auto& [k, v] : metadata_) {
    if (!keys.insert(k).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF metadata key '", k, "' given twice"));
    }
  }
  std::string header;
  header.append("GGUF", 4);
  Put<uint32_t>(&header, 3);
  Put<uint64_t>(&header, tensors_.size());
  Put<uint64_t>(&header, metadata_.size());
  for (const auto& [k, v] : metadata_) {
    PutString(&header, k);
    header += v;
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TensorView& t : tensors_) {
    const std::optional<uint32_t> type = GgmlTypeOfDType(t.dtype);
    if (!type) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' has dtype ", DTypeName(t.dtype),
                       ", which GGUF files of lrkv do not hold"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' given twice"));
    }
    if (t.shape.empty() || t.shape.size() > 4 ||
        TensorBytes(t.dtype, static_cast<uint64_t>(t.numel()),
                    t.shape.back()) != t.nbytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': shape and byte size disagree"));
    }
    PutString(&header, t.name);
    Put<uint32_t>(&header, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      Put<uint64_t>(&header, static_cast<uint64_t>(*it));  // innermost first
    }
    Put<uint32_t>(&header, *type);
    Put<uint64_t>(&header, offset);
    offsets.push_back(offset);
    offset = (offset + t.nbytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  header.resize((header.size() + kAlignment - 1) / kAlignment * kAlignment,
                '\0');

  ASSIGN_OR_RETURN(auto out, BlockFile::Create(path));
  RETURN_IF_ERROR(out->Write(header.data(), header.size()));
  uint64_t end = 0;
  const std::string zeros(kAlignment, '\0');
  for (size_t i = 0; i < tensors_.size(); ++i) {
    RETURN_IF_ERROR(out->Write(zeros.data(), offsets[i] - end));
    RETURN_IF_ERROR(out->Write(tensors_[i].data, tensors_[i].nbytes));
    end = offsets[i] + tensors_[i].nbytes;
  }
  return out->Commit();
}

}  // namespace lrkv
