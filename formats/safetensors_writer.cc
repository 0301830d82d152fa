// Streaming, sharded safetensors writer (see safetensors_writer.h).
#include "formats/safetensors_writer.h"

#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

uint64_t TensorSpec::nbytes() const {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

absl::StatusOr<std::string> SafetensorsHeader(
    const std::vector<TensorSpec>& specs,
    const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : specs) {
    if (header.contains(t.name))
      return Invalid(absl::StrCat("duplicate tensor name '", t.name, "'"));
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  // The data section starts on a 64-byte line (the 8-byte length, then the
  // header padded with spaces, which the format allows; Hugging Face's writer
  // pads to 8). The readers decode from the mapped file in place, and the
  // format allows no gaps between tensors, so a tensor starts on a line when
  // the ones before it are whole lines long (every matrix with rows of a
  // multiple of 32 bf16): then its 64-byte vector loads stay within one cache
  // line. The Qwen3-0.6B shape's decode step measured 26.6 against 31.7 ms
  // with the same weights at offset 8 mod 64 (context 16, one run).
  constexpr size_t kDataAlignment = 64;
  std::string text = header.dump();
  text.append(
      (kDataAlignment - (8 + text.size()) % kDataAlignment) % kDataAlignment,
      ' ');
  std::string out;
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + text;
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpointWriter>>
SafetensorsCheckpointWriter::Create(const std::string& dir,
                                    std::vector<TensorSpec> specs,
                                    SafetensorsShardOptions options) {
  std::set<std::string> names;
  for (const auto& s : specs) {
    if (!names.insert(s.name).second) {
      return Invalid(absl::StrCat("duplicate tensor name '", s.name, "'"));
    }
  }
  if (options.max_shard_bytes == 0)
    return Invalid("the shard size limit must be positive");
  std::unique_ptr<SafetensorsCheckpointWriter> w(
      new SafetensorsCheckpointWriter());
  w->dir_ = dir;
  w->options_ = std::move(options);
  // Hugging Face's rule: a tensor opens a new shard when it would push a
  // non-empty shard past the limit.
  size_t shard = 0;
  uint64_t size = 0;
  for (const auto& s : specs) {
    if (size > 0 && size + s.nbytes() > w->options_.max_shard_bytes) {
      ++shard;
      size = 0;
    }
    size += s.nbytes();
    w->shard_of_.push_back(shard);
  }
  const size_t shards = specs.empty() ? 1 : shard + 1;
  for (size_t i = 0; i < shards; ++i) {
    w->shard_files_.push_back(
        shards == 1
            ? std::string(kSafetensorsFileName)
            : absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards));
  }
  w->specs_ = std::move(specs);
  if (w->specs_.empty()) RETURN_IF_ERROR(w->OpenShard(0));
  return w;
}

absl::Status SafetensorsCheckpointWriter::OpenShard(size_t shard) {
  std::vector<TensorSpec> in_shard;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (shard_of_[i] == shard) in_shard.push_back(specs_[i]);
  }
  ASSIGN_OR_RETURN(std::string header,
                   SafetensorsHeader(in_shard, options_.metadata));
  ASSIGN_OR_RETURN(file_, BlockFile::Create(
                              (fs::path(dir_) / shard_files_[shard]).string()));
  open_shard_ = shard;
  return file_->Write(header.data(), header.size());
}

absl::Status SafetensorsCheckpointWriter::CloseShard() {
  if (file_ == nullptr) return absl::OkStatus();
  const absl::Status committed = file_->Commit();
  file_.reset();
  return committed;
}

absl::Status SafetensorsCheckpointWriter::Write(const std::string& name,
                                                const void* data,
                                                uint64_t nbytes) {
  if (next_ >= specs_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", name, "' written after the last one"));
  }
  const TensorSpec& spec = specs_[next_];
  if (name != spec.name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", name, "' written where '", spec.name, "' was planned"));
  }
  if (nbytes != spec.nbytes()) {
    return Invalid(absl::StrCat("tensor '", name, "' has ", nbytes,
                                " bytes for shape ", ShapeString(spec.shape),
                                " ", DTypeName(spec.dtype)));
  }
  if (open_shard_ != shard_of_[next_]) {
    RETURN_IF_ERROR(CloseShard());
    RETURN_IF_ERROR(OpenShard(shard_of_[next_]));
  }
  RETURN_IF_ERROR(file_->Write(data, nbytes));
  ++next_;
  return absl::OkStatus();
}

absl::Status SafetensorsCheckpointWriter::Finish() {
  if (next_ != specs_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint finished after ", next_, " of ", specs_.size(),
                     " tensors"));
  }
  RETURN_IF_ERROR(CloseShard());
  if (shard_files_.size() == 1) return absl::OkStatus();
  json index;
  uint64_t total = 0;
  json weight_map = json::object();
  for (size_t i = 0; i < specs_.size(); ++i) {
    total += specs_[i].nbytes();
    weight_map[specs_[i].name] = shard_files_[shard_of_[i]];
  }
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  return WriteFileAtomically(
      (fs::path(dir_) / kSafetensorsIndexFileName).string(),
      index.dump(2) + "\n");
}

}  // namespace lrkv
