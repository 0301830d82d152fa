// safetensors checkpoints: a validating parser, a (sharded) memory-mapped reader and
// a writer. The checks follow the reference implementation (huggingface/safetensors).
#include "formats/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_limits.h"
#include "formats/safetensors_writer.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "formats/block_file.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses JSON within the file limits (json_limits.h), rejecting duplicate keys in any
// object (nlohmann would silently keep the last one).
absl::StatusOr<json> ParseJsonNoDuplicateKeys(std::string_view text,
                                              const std::string& what) {
  JsonLimits limits = kFileJsonLimits;
  limits.refuse_duplicate_keys = true;
  return ParseJsonBounded(text, limits, what);
}

absl::StatusOr<uint64_t> JsonUnsigned(const json& v, const std::string& what) {
  if (!v.is_number_unsigned()) {
    return Invalid(absl::StrCat(what, " must be a non-negative integer, got ",
                                v.dump()));
  }
  return v.get<uint64_t>();
}

struct Entry {
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& name, const json& info) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!info.is_object()) return Invalid(where + " entry is not a JSON object");
  Entry e;
  e.view.name = name;
  auto dt = info.find("dtype");
  if (dt == info.end() || !dt->is_string()) return Invalid(where + " has no dtype");
  const auto dtype = ParseDTypeName(dt->get<std::string>());
  if (!dtype) {
    return Invalid(absl::StrCat(where, " has unknown dtype '",
                                dt->get<std::string>(), "'"));
  }
  e.view.dtype = *dtype;
  auto sh = info.find("shape");
  if (sh == info.end() || !sh->is_array()) return Invalid(where + " has no shape array");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    ASSIGN_OR_RETURN(uint64_t dim, JsonUnsigned(d, where + " shape entry"));
    if (dim > static_cast<uint64_t>(INT64_MAX) || !CheckedMul(numel, dim, &numel) ||
        numel > static_cast<uint64_t>(INT64_MAX)) {
      return Invalid(absl::StrCat(where, " shape ", sh->dump(),
                                  " has an element count that overflows 64 bits"));
    }
    e.view.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t nbytes;
  if (!CheckedMul(numel, DTypeSize(*dtype), &nbytes)) {
    return Invalid(absl::StrCat(where, " shape ", sh->dump(),
                                " has a byte size that overflows 64 bits"));
  }
  auto off = info.find("data_offsets");
  if (off == info.end() || !off->is_array() || off->size() != 2) {
    return Invalid(where + " needs data_offsets [begin, end]");
  }
  ASSIGN_OR_RETURN(e.begin, JsonUnsigned((*off)[0], where + " data_offsets"));
  ASSIGN_OR_RETURN(e.end, JsonUnsigned((*off)[1], where + " data_offsets"));
  if (e.end < e.begin) {
    return Invalid(absl::StrCat(where, " data_offsets [", e.begin, ", ", e.end,
                                "] end before they begin"));
  }
  if (e.end - e.begin != nbytes) {
    return Invalid(absl::StrCat(where, " has shape ", ShapeString(e.view.shape), " ",
                                DTypeName(*dtype), " = ", nbytes,
                                " bytes but its data_offsets span ", e.end - e.begin,
                                " bytes"));
  }
  e.view.nbytes = nbytes;
  return e;
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::Span<const uint8_t> file) {
  if (file.size() < 8) {
    return Invalid(absl::StrCat("file is ", file.size(),
                                " bytes, too short for the 8-byte header length"));
  }
  const uint64_t header_len = ReadLe64(file.data());
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return Invalid(absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_len > file.size() - 8) {
    return Invalid(absl::StrCat("header length ", header_len,
                                " runs past the end of the file (", file.size(),
                                " bytes)"));
  }
  const std::string_view header(reinterpret_cast<const char*>(file.data() + 8),
                                header_len);
  size_t bad = 0;
  if (!IsValidUtf8(header, &bad)) {
    return Invalid(absl::StrCat("header is not valid UTF-8 (bad byte at header offset ",
                                bad, ")"));
  }
  ASSIGN_OR_RETURN(json j, ParseJsonNoDuplicateKeys(header, "header"));
  if (!j.is_object()) return Invalid("header is not a JSON object");

  SafetensorsContents out;
  std::vector<Entry> entries;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Invalid("__metadata__ is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Invalid(absl::StrCat("__metadata__ value for '", m.key(),
                                      "' is not a string"));
        }
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(Entry e, ParseEntry(it.key(), *it));
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_len = file.size() - 8 - header_len;
  const uint8_t* data = file.data() + 8 + header_len;
  uint64_t expected = 0;
  for (auto& e : entries) {
    if (e.begin > expected) {
      return Invalid(absl::StrCat("gap in tensor data: tensor '", e.view.name,
                                  "' begins at offset ", e.begin,
                                  " but the previous tensor ends at ", expected));
    }
    if (e.begin < expected) {
      return Invalid(absl::StrCat("overlapping tensor data: tensor '", e.view.name,
                                  "' begins at offset ", e.begin,
                                  " inside the previous tensor, which ends at ",
                                  expected));
    }
    if (e.end > data_len) {
      return Invalid(absl::StrCat("tensor '", e.view.name, "' ends at offset ", e.end,
                                  " past the end of the data section (", data_len,
                                  " bytes): file truncated?"));
    }
    expected = e.end;
    e.view.data = data + e.begin;
    out.tensors.push_back(std::move(e.view));
  }
  if (expected != data_len) {
    return Invalid(absl::StrCat("tensor data ends at offset ", expected,
                                " but the data section is ", data_len,
                                " bytes (trailing bytes)"));
  }
  return out;
}

absl::Status SafetensorsReader::AddShard(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  auto parsed = ParseSafetensors(file->bytes());
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path, ": ", parsed.status().message()));
  }
  for (auto& [k, v] : parsed->metadata) metadata_[k] = v;
  for (auto& t : parsed->tensors) {
    if (index_.count(t.name) != 0) {
      return Invalid(absl::StrCat(path, ": tensor '", t.name,
                                  "' also appears in another shard"));
    }
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

const TensorView* SafetensorsReader::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path_in) {
  fs::path path(path_in);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "model.safetensors.index.json", ec)) {
      path /= "model.safetensors.index.json";
    } else if (fs::exists(path / "model.safetensors", ec)) {
      path /= "model.safetensors";
    } else {
      return absl::NotFoundError(absl::StrCat(
          path_in, ": no model.safetensors or model.safetensors.index.json"));
    }
  }
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader());
  if (path.extension() != ".json") {
    RETURN_IF_ERROR(reader->AddShard(path.string()));
    return reader;
  }
  // Sharded: the index maps each tensor name to the shard holding it.
  ASSIGN_OR_RETURN(auto index_file, MappedFile::Open(path.string()));
  const auto bytes = index_file->bytes();
  auto parsed = ParseJsonNoDuplicateKeys(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
      path.string());
  if (!parsed.ok()) return parsed.status();
  const json& index = *parsed;
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (wm == index.end() || !wm->is_object()) {
    return Invalid(absl::StrCat(path.string(), ": no weight_map object"));
  }
  std::map<std::string, std::string> weight_map;
  std::set<std::string> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      return Invalid(absl::StrCat(path.string(), ": weight_map entry '", it.key(),
                                  "' is not a file name"));
    }
    const std::string shard = it->get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
        shard == "..") {
      return Invalid(absl::StrCat(path.string(), ": shard name '", shard,
                                  "' must be a plain file name in the same folder"));
    }
    weight_map[it.key()] = shard;
    shards.insert(shard);
  }
  for (const auto& shard : shards) {
    const std::string shard_path = (path.parent_path() / shard).string();
    const size_t before = reader->tensors_.size();
    RETURN_IF_ERROR(reader->AddShard(shard_path));
    for (size_t i = before; i < reader->tensors_.size(); ++i) {
      const auto& name = reader->tensors_[i].name;
      auto w = weight_map.find(name);
      if (w == weight_map.end() || w->second != shard) {
        return Invalid(absl::StrCat(shard_path, ": tensor '", name,
                                    "' is not mapped to this shard by ",
                                    path.filename().string()));
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (reader->Find(name) == nullptr) {
      return Invalid(absl::StrCat(path.string(), ": tensor '", name,
                                  "' is missing from shard ", shard));
    }
  }
  reader->files_.push_back(std::move(index_file));
  return reader;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  ASSIGN_OR_RETURN(auto out, BlockFile::Create(path));
  RETURN_IF_ERROR(out->Write(contents.data(), contents.size()));
  return out->Commit();
}

absl::Status WriteDirectoryAtomically(
    const std::string& out_dir, const std::function<absl::Status(const std::string&)>& fill) {
  const fs::path out = fs::absolute(out_dir);
  const fs::path tmp = out.parent_path() / (out.filename().string() + ".partial");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  absl::Status st = fill(tmp.string());
  if (st.ok()) {
    fs::remove(out, ec);  // absent or an empty folder
    fs::rename(tmp, out, ec);
    if (ec) st = absl::InternalError(absl::StrCat(out.string(), ": ", ec.message()));
  }
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) {
    if (static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype) != t.nbytes) {
      return Invalid(absl::StrCat("tensor '", t.name, "' has ", t.nbytes,
                                  " bytes for shape ", ShapeString(t.shape)));
    }
    specs.push_back({t.name, t.dtype, t.shape});
  }
  ASSIGN_OR_RETURN(const std::string header, SafetensorsHeader(specs, metadata));
  // Streamed from the views: a model is never copied into one buffer to be written.
  ASSIGN_OR_RETURN(auto out, BlockFile::Create(path));
  RETURN_IF_ERROR(out->Write(header.data(), header.size()));
  for (const auto& t : tensors) RETURN_IF_ERROR(out->Write(t.data, t.nbytes));
  return out->Commit();
}

}  // namespace lrkv
