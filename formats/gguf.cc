// GGUF (v2/v3) checkpoints: a validating parser of metadata and tensor infos.
#include "formats/gguf.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/block_quant.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

size_t ScalarSize(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

struct GgmlType {
  uint32_t id;
  const char* name;
};
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32"},      {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},   {6, "Q5_0"},
    {7, "Q5_1"},     {8, "Q8_0"},    {9, "Q8_1"},    {10, "Q2_K"},  {11, "Q3_K"},
    {12, "Q4_K"},    {13, "Q5_K"},   {14, "Q6_K"},   {15, "Q8_K"},  {16, "IQ2_XXS"},
    {17, "IQ2_XS"},  {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
    {22, "IQ2_S"},   {23, "IQ4_XS"}, {24, "I8"},     {25, "I16"},   {26, "I32"},
    {27, "I64"},     {28, "F64"},    {29, "IQ1_M"},  {30, "BF16"},  {34, "TQ1_0"},
    {35, "TQ2_0"},   {39, "MXFP4"},
};

// Bounds-checked little-endian cursor over the file.
class Cursor {
 public:
  explicit Cursor(absl::Span<const uint8_t> b) : b_(b) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }

  template <typename T>
  absl::StatusOr<T> Read(const char* what) {
    if (remaining() < sizeof(T)) {
      return Invalid(absl::StrCat("file truncated while reading ", what, " at offset ",
                                  pos_));
    }
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(const std::string& what) {
    ASSIGN_OR_RETURN(uint64_t n, Read<uint64_t>(what.c_str()));
    if (n > remaining()) {
      return Invalid(absl::StrCat(what, " has length ", n, " past the end of the file"));
    }
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    if (!IsValidUtf8(s)) return Invalid(absl::StrCat(what, " is not valid UTF-8"));
    return s;
  }

 private:
  absl::Span<const uint8_t> b_;
  size_t pos_ = 0;
};

absl::StatusOr<GgufValue::Scalar> ReadScalar(Cursor& c, uint32_t type,
                                             const std::string& key) {
  switch (type) {
    case kU8: { ASSIGN_OR_RETURN(auto v, c.Read<uint8_t>(key.c_str())); return uint64_t{v}; }
    case kU16: { ASSIGN_OR_RETURN(auto v, c.Read<uint16_t>(key.c_str())); return uint64_t{v}; }
    case kU32: { ASSIGN_OR_RETURN(auto v, c.Read<uint32_t>(key.c_str())); return uint64_t{v}; }
    case kU64: { ASSIGN_OR_RETURN(auto v, c.Read<uint64_t>(key.c_str())); return v; }
    case kI8: { ASSIGN_OR_RETURN(auto v, c.Read<int8_t>(key.c_str())); return int64_t{v}; }
    case kI16: { ASSIGN_OR_RETURN(auto v, c.Read<int16_t>(key.c_str())); return int64_t{v}; }
    case kI32: { ASSIGN_OR_RETURN(auto v, c.Read<int32_t>(key.c_str())); return int64_t{v}; }
    case kI64: { ASSIGN_OR_RETURN(auto v, c.Read<int64_t>(key.c_str())); return v; }
    case kF32: { ASSIGN_OR_RETURN(auto v, c.Read<float>(key.c_str())); return double{v}; }
    case kF64: { ASSIGN_OR_RETURN(auto v, c.Read<double>(key.c_str())); return v; }
    case kBool: {
      ASSIGN_OR_RETURN(auto v, c.Read<uint8_t>(key.c_str()));
      if (v > 1) return Invalid(absl::StrCat("metadata '", key, "' bool is ", int{v}));
      return v == 1;
    }
    case kString: {
      ASSIGN_OR_RETURN(auto s, c.ReadString(absl::StrCat("metadata '", key, "' string")));
      return s;
    }
    default:
      return Invalid(absl::StrCat("metadata '", key, "' has unknown value type ", type));
  }
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, const std::string& key) {
  ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("metadata value type"));
  GgufValue v;
  if (type != kArray) {
    v.type = type;
    ASSIGN_OR_RETURN(v.scalar, ReadScalar(c, type, key));
    return v;
  }
  v.is_array = true;
  ASSIGN_OR_RETURN(v.type, c.Read<uint32_t>("array element type"));
  ASSIGN_OR_RETURN(uint64_t n, c.Read<uint64_t>("array length"));
  if (v.type == kArray) {
    return Invalid(absl::StrCat("metadata '", key, "' is a nested array (unsupported)"));
  }
  // Every element takes at least one byte (strings eight), so a count larger than
  // the bytes left is a lie: reject it before reserving anything.
  const size_t min_size = v.type == kString ? 8 : ScalarSize(v.type);
  if (min_size == 0) {
    return Invalid(absl::StrCat("metadata '", key, "' has unknown array element type ",
                                v.type));
  }
  if (n > c.remaining() / min_size) {
    return Invalid(absl::StrCat("metadata '", key, "' array of ", n,
                                " elements runs past the end of the file"));
  }
  v.array.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(auto s, ReadScalar(c, v.type, key));
    v.array.push_back(std::move(s));
  }
  return v;
}

const GgufValue* FindKey(const GgufContents& g, const std::string& key) {
  auto it = g.metadata.find(key);
  return it == g.metadata.end() ? nullptr : &it->second;
}

}  // namespace

std::optional<DType> DTypeOfGgmlType(uint32_t type) {
  switch (type) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 8: return DType::kQ8_0;
    case 12: return DType::kQ4_K;
    case 14: return DType::kQ6_K;
    case 30: return DType::kBF16;
    default: return std::nullopt;
  }
}

std::optional<uint32_t> GgmlTypeOfDType(DType dtype) {
  for (uint32_t t : {0u, 1u, 2u, 8u, 12u, 14u, 30u}) {
    if (DTypeOfGgmlType(t) == dtype) return t;
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t type) {
  for (const auto& t : kGgmlTypes) {
    if (t.id == type) return t.name;
  }
  return absl::StrCat("type ", type);
}

absl::StatusOr<GgufContents> ParseGguf(absl::Span<const uint8_t> file) {
  Cursor c(file);
  if (file.size() < 4 || std::memcmp(file.data(), "GGUF", 4) != 0) {
    return Invalid("not a GGUF file (magic is not 'GGUF')");
  }
  ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("magic"));
  (void)magic;
  GgufContents g;
  ASSIGN_OR_RETURN(g.version, c.Read<uint32_t>("version"));
  if (g.version != 2 && g.version != 3) {
    return Invalid(absl::StrCat("unsupported GGUF version ", g.version,
                                " (supported: 2, 3)"));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("metadata count"));
  // A key-value pair needs >= 12 bytes and a tensor info >= 24.
  if (n_kv > c.remaining() / 12) {
    return Invalid(absl::StrCat("metadata count ", n_kv, " cannot fit in the file"));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    ASSIGN_OR_RETURN(std::string key, c.ReadString(absl::StrCat("metadata key #", i)));
    if (g.metadata.count(key) != 0) {
      return Invalid(absl::StrCat("duplicate metadata key '", key, "'"));
    }
    ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, key));
    g.metadata.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = FindKey(g, "general.alignment")) {
    const auto* u = std::get_if<uint64_t>(&a->scalar);
    if (a->is_array || u == nullptr || *u == 0 || (*u & (*u - 1)) != 0 || *u > 65536) {
      return Invalid("general.alignment must be a power of two up to 65536");
    }
    g.alignment = *u;
  }
  if (n_tensors > c.remaining() / 24) {
    return Invalid(absl::StrCat("tensor count ", n_tensors, " cannot fit in the file"));
  }
  struct Info {
    TensorView view;
    uint64_t offset;
  };
  std::vector<Info> infos;
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info info;
    ASSIGN_OR_RETURN(info.view.name, c.ReadString(absl::StrCat("tensor name #", i)));
    const std::string where = absl::StrCat("tensor '", info.view.name, "'");
    if (!names.insert(info.view.name).second) {
      return Invalid(absl::StrCat("duplicate tensor name '", info.view.name, "'"));
    }
    ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>("tensor dimension count"));
    if (n_dims > 4) {
      return Invalid(absl::StrCat(where, " has ", n_dims, " dimensions (at most 4)"));
    }
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t dim, c.Read<uint64_t>("tensor dimension"));
      if (dim > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(numel, dim, &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX)) {
        return Invalid(absl::StrCat(where,
                                    " has an element count that overflows 64 bits"));
      }
      dims.push_back(static_cast<int64_t>(dim));
    }
    info.view.shape.assign(dims.rbegin(), dims.rend());
    ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("tensor type"));
    if (auto dtype = DTypeOfGgmlType(type)) {
      info.view.dtype = *dtype;
    } else {
      const std::string name = GgmlTypeName(type);
      if (name.rfind("type ", 0) == 0) {
        return Invalid(absl::StrCat(where, " has unknown ggml type ", type));
      }
      return Invalid(absl::StrCat(where, " has type ", name,
                                  ", which is not supported: F32, F16, BF16, Q8_0, Q4_K "
                                  "and Q6_K tensors can be read"));
    }
    const uint64_t row = dims.empty() ? 1 : dims.front();  // innermost
    auto nbytes = TensorBytes(info.view.dtype, numel, row);
    if (!nbytes) {
      return Invalid(absl::StrCat(where, " (", DTypeName(info.view.dtype), ", rows of ", row,
                                  ") has rows that are not whole blocks of ",
                                  BlockValues(info.view.dtype),
                                  " values, or a byte size that overflows 64 bits"));
    }
    info.view.nbytes = *nbytes;
    ASSIGN_OR_RETURN(info.offset, c.Read<uint64_t>("tensor offset"));
    if (info.offset % g.alignment != 0) {
      return Invalid(absl::StrCat(where, " offset ", info.offset,
                                  " is not a multiple of the alignment ", g.alignment));
    }
    infos.push_back(std::move(info));
  }
  const uint64_t data_start = (c.pos() + g.alignment - 1) / g.alignment * g.alignment;
  if (data_start > file.size()) {
    return Invalid("file truncated before the tensor data section");
  }
  const uint64_t data_len = file.size() - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto& info : infos) {
    uint64_t end;
    if (__builtin_add_overflow(info.offset, info.view.nbytes, &end) || end > data_len) {
      return Invalid(absl::StrCat("tensor '", info.view.name, "' data [", info.offset,
                                  ", +", info.view.nbytes,
                                  ") runs past the end of the file: truncated?"));
    }
    spans.emplace_back(info.offset, end);
    info.view.data = file.data() + data_start + info.offset;
    g.tensors.push_back(std::move(info.view));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      return Invalid(absl::StrCat("overlapping tensor data at offset ", spans[i].first));
    }
  }
  return g;
}

absl::StatusOr<uint64_t> GgufUint(const GgufContents& g, const std::string& key) {
  const GgufValue* v = FindKey(g, key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata '", key, "'"));
  if (!v->is_array) {
    if (const auto* u = std::get_if<uint64_t>(&v->scalar)) return *u;
    if (const auto* i = std::get_if<int64_t>(&v->scalar); i != nullptr && *i >= 0) {
      return static_cast<uint64_t>(*i);
    }
  }
  return Invalid(absl::StrCat("metadata '", key, "' is not a non-negative integer"));
}

absl::StatusOr<double> GgufFloat(const GgufContents& g, const std::string& key) {
  const GgufValue* v = FindKey(g, key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata '", key, "'"));
  if (!v->is_array) {
    if (const auto* d = std::get_if<double>(&v->scalar)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&v->scalar)) return static_cast<double>(*u);
  }
  return Invalid(absl::StrCat("metadata '", key, "' is not a number"));
}

absl::StatusOr<std::string> GgufString(const GgufContents& g, const std::string& key) {
  const GgufValue* v = FindKey(g, key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata '", key, "'"));
  if (!v->is_string()) return Invalid(absl::StrCat("metadata '", key, "' is not a string"));
  return std::get<std::string>(v->scalar);
}

absl::StatusOr<bool> GgufBool(const GgufContents& g, const std::string& key) {
  const GgufValue* v = FindKey(g, key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata '", key, "'"));
  if (!v->is_array) {
    if (const auto* b = std::get_if<bool>(&v->scalar)) return *b;
  }
  return Invalid(absl::StrCat("metadata '", key, "' is not a bool"));
}

absl::StatusOr<std::unique_ptr<GgufReader>> GgufReader::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  auto parsed = ParseGguf(file->bytes());
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path, ": ", parsed.status().message()));
  }
  return std::unique_ptr<GgufReader>(new GgufReader(std::move(file), std::move(*parsed)));
}

}  // namespace lrkv
