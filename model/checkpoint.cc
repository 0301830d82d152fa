// A checkpoint on disk, whatever its format (see checkpoint.h).
#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

absl::Status WithPath(const absl::Status& s, const std::string& path) {
  if (s.ok() || absl::string_view(s.message()).find(path) != absl::string_view::npos) {
    return s;
  }
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": cannot read: ", ec.message()));
  if (size > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes is larger than the ", limit, "-byte limit"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HasGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

struct NameMap {
  const char* gguf;
  const char* hf;
};
constexpr NameMap kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
constexpr NameMap kLayerNames[] = {
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    // deepseek2 (MLA with decoupled RoPE); attn_k_b / attn_v_b are fused into
    // kv_b_proj on opening (FuseDeepseekGgufKvB).
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
};

// What a folder without a tokenizer was searched for, for messages.
std::string TokenizerFilesLookedFor() {
  return absl::StrCat("no tokenizer: looked for ", kHfTokenizerFileName, " (with ",
                      kHfTokenizerConfigFileName, ") and ", kTokenizerFileName);
}

absl::StatusOr<std::optional<Tokenizer>> TokenizerInFolder(const fs::path& dir) {
  std::error_code ec;
  const fs::path hf = dir / kHfTokenizerFileName;
  if (fs::exists(hf, ec)) {
    ASSIGN_OR_RETURN(std::string tok, ReadSmallFile(hf.string(), 256 << 20));
    std::string config;
    if (const fs::path c = dir / kHfTokenizerConfigFileName; fs::exists(c, ec)) {
      ASSIGN_OR_RETURN(config, ReadSmallFile(c.string(), 64 << 20));
    }
    ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::FromHfFiles(tok, config, dir.string()));
    return std::optional<Tokenizer>(std::move(t));
  }
  const fs::path lrkv = dir / kTokenizerFileName;
  if (fs::exists(lrkv, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadSmallFile(lrkv.string(), 64 << 20));
    ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::FromJson(text, lrkv.string()));
    return std::optional<Tokenizer>(std::move(t));
  }
  return std::optional<Tokenizer>();
}

}  // namespace

absl::StatusOr<Tokenizer> LoadTokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  if (!fs::is_directory(path, ec) && HasGgufMagic(path)) {
    ASSIGN_OR_RETURN(auto gguf, GgufReader::Open(path));
    if (gguf->contents().metadata.count("tokenizer.ggml.model") == 0) {
      return absl::NotFoundError(
          absl::StrCat(path, ": the GGUF file has no tokenizer (tokenizer.ggml.* metadata)"));
    }
    auto t = Tokenizer::FromGguf(gguf->contents());
    if (!t.ok()) return WithPath(t.status(), path);
    return t;
  }
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  ASSIGN_OR_RETURN(std::optional<Tokenizer> t, TokenizerInFolder(dir));
  if (!t) {
    return absl::NotFoundError(
        absl::StrCat(path, ": ", TokenizerFilesLookedFor(), " in ", dir.string()));
  }
  return std::move(*t);
}

absl::Status ReconcileTokenizer(const Tokenizer& tok, const std::string& path,
                                ModelConfig* config) {
  const int64_t n = tok.size(), rows = config->vocab_size;
  if (n > rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer has ", n, " tokens but the model's vocab_size is ", rows));
  }
  if (n * 10 < rows * 9) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer has ", n, " tokens but the model's embedding has ", rows,
        " rows: not this model's tokenizer (padding never leaves 10 % of the rows unused)"));
  }
  const SpecialTokens& s = tok.specials();
  if (s.bos_id >= 0 && config->bos_token_id >= 0 && s.bos_id != config->bos_token_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer's BOS token is id ", s.bos_id,
        " but the model config's bos_token_id is ", config->bos_token_id));
  }
  auto& eos = config->eos_token_ids;
  if (s.eos_id >= 0 && !eos.empty() && std::find(eos.begin(), eos.end(), s.eos_id) == eos.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer's EOS token is id ", s.eos_id,
        " but the model config's eos_token_id is ",
        eos.size() == 1 ? absl::StrCat(eos[0]) : absl::StrCat("[", absl::StrJoin(eos, ", "), "]")));
  }
  // Every consumer (eval, calibration, healing, verify) starts documents with it.
  if (tok.document_start_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the tokenizer names neither a BOS nor an EOS token, so "
                           "documents have no start token"));
  }
  if (config->bos_token_id < 0) config->bos_token_id = s.bos_id;
  if (eos.empty() && s.eos_id >= 0) eos.push_back(s.eos_id);
  return absl::OkStatus();
}

std::string CanonicalNameFromGguf(const std::string& name) {
  for (const auto& m : kGlobalNames) {
    if (name == m.gguf) return m.hf;
  }
  if (name.rfind("blk.", 0) == 0) {
    const size_t dot = name.find('.', 4);
    if (dot != std::string::npos) {
      const std::string layer = name.substr(4, dot - 4);
      const std::string rest = name.substr(dot + 1);
      for (const auto& m : kLayerNames) {
        if (rest == m.gguf) return absl::StrCat("model.layers.", layer, ".", m.hf);
      }
    }
  }
  return name;
}

std::string GgufNameFromCanonical(const std::string& name) {
  for (const auto& m : kGlobalNames) {
    if (name == m.hf) return m.gguf;
  }
  constexpr std::string_view kLayers = "model.layers.";
  if (name.rfind(kLayers, 0) == 0) {
    const size_t dot = name.find('.', kLayers.size());
    if (dot != std::string::npos) {
      const std::string layer = name.substr(kLayers.size(), dot - kLayers.size());
      const std::string rest = name.substr(dot + 1);
      for (const auto& m : kLayerNames) {
        if (rest == m.hf) return absl::StrCat("blk.", layer, ".", m.gguf);
      }
    }
  }
  return "";
}

// kv_b_proj [H·2d_h, d_c] of layer `layer` from llama.cpp's per-head split:
// head h's rows are k_b[h]ᵀ (k_b [H, d_c, d_h]) then v_b[h] ([H, d_h, d_c]).
static absl::StatusOr<std::vector<uint8_t>> FusedKvB(const TensorView& k_b,
                                                     const TensorView& v_b) {
  // Element-wise float storage only (block-quantised rows cannot be
  // transposed).
  const uint64_t es = IsFloatWeightDType(v_b.dtype) ? DTypeSize(v_b.dtype) : 0;
  if (es == 0 || k_b.dtype != v_b.dtype || k_b.shape.size() != 3 ||
      v_b.shape.size() != 3 || k_b.shape[0] != v_b.shape[0] ||
      k_b.shape[1] != v_b.shape[2] || k_b.shape[2] != v_b.shape[1]) {
    return absl::InvalidArgumentError(
        absl::StrCat(k_b.name, " ", ShapeString(k_b.shape), " and ", v_b.name,
                     " ", ShapeString(v_b.shape),
                     ": need F32/F16/BF16 [H, d_c, d_h] and [H, d_h, d_c]"));
  }
  const int64_t h = k_b.shape[0], dc = k_b.shape[1], dh = k_b.shape[2];
  std::vector<uint8_t> out(static_cast<size_t>(h * 2 * dh * dc) * es);
  uint8_t* row = out.data();
  for (int64_t head = 0; head < h; ++head) {
    const uint8_t* k = k_b.data + head * dc * dh * es;
    for (int64_t i = 0; i < dh; ++i) {
      for (int64_t c = 0; c < dc; ++c, row += es) {
        std::memcpy(row, k + (c * dh + i) * es, es);
      }
    }
    const size_t v_bytes = static_cast<size_t>(dh * dc) * es;
    std::memcpy(row, v_b.data + head * v_bytes, v_bytes);
    row += v_bytes;
  }
  return out;
}

absl::Status FuseDeepseekGgufKvB(Checkpoint* ckpt) {
  for (int64_t i = 0; i < ckpt->config_.num_layers; ++i) {
    const std::string blk = absl::StrCat("blk.", i, ".");
    const TensorView* k_b = ckpt->Find(blk + "attn_k_b.weight");
    const TensorView* v_b = ckpt->Find(blk + "attn_v_b.weight");
    if (k_b == nullptr || v_b == nullptr)
      continue;  // the loader names what is missing
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, FusedKvB(*k_b, *v_b));
    TensorView fused;
    fused.name =
        absl::StrCat("model.layers.", i, ".self_attn.kv_b_proj.weight");
    fused.dtype = v_b->dtype;
    fused.shape = {k_b->shape[0] * 2 * k_b->shape[2], k_b->shape[1]};
    fused.nbytes = bytes.size();
    ckpt->assembled_.push_back(std::move(bytes));
    fused.data = ckpt->assembled_.back().data();
    ckpt->tensors_.push_back(std::move(fused));
  }
  // The split halves are now part of kv_b_proj: the model has no place for
  // them.
  auto split = [](const TensorView& t) {
    return t.name.rfind("blk.", 0) == 0 &&
           (t.name.find(".attn_k_b.weight") != std::string::npos ||
            t.name.find(".attn_v_b.weight") != std::string::npos);
  };
  ckpt->tensors_.erase(
      std::remove_if(ckpt->tensors_.begin(), ckpt->tensors_.end(), split),
      ckpt->tensors_.end());
  ckpt->Index();
  return absl::OkStatus();
}

void Checkpoint::Index() {
  index_.clear();
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

absl::StatusOr<const Tokenizer*> Checkpoint::RequireTokenizer() const {
  if (tokenizer_) return &*tokenizer_;
  if (format_ == CheckpointFormat::kGguf) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": no tokenizer: the GGUF file has no tokenizer.ggml.* metadata"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path_, ": ", TokenizerFilesLookedFor(), " beside the weights"));
}

const TensorView* Checkpoint::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  if (!fs::is_directory(path, ec) && HasGgufMagic(path)) {
    ckpt->format_ = CheckpointFormat::kGguf;
    ASSIGN_OR_RETURN(ckpt->gguf_, GgufReader::Open(path));
    const GgufContents& g = ckpt->gguf_->contents();
    auto config = ConfigFromGguf(g);
    if (!config.ok()) return WithPath(config.status(), path);
    ckpt->config_ = *config;
    if (g.metadata.count("tokenizer.ggml.model") != 0) {
      auto tok = Tokenizer::FromGguf(g);
      if (!tok.ok()) return WithPath(tok.status(), path);
      RETURN_IF_ERROR(ReconcileTokenizer(*tok, path, &ckpt->config_));
      ckpt->tokenizer_ = std::move(*tok);
    }
    for (const auto& t : g.tensors) {
      TensorView v = t;
      v.name = CanonicalNameFromGguf(t.name);
      ckpt->tensors_.push_back(std::move(v));
    }
    ckpt->Index();
    if (ckpt->config_.deepseek_layout) {
      if (auto s = FuseDeepseekGgufKvB(ckpt.get()); !s.ok())
        return WithPath(s, path);
    }
    return ckpt;
  }
  if (!fs::is_directory(path, ec) && fs::path(path).extension() == ".gguf") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a GGUF file (magic is not 'GGUF')"));
  }
  if (!fs::is_directory(path, ec) && fs::path(path).extension() != ".safetensors") {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a checkpoint: neither a GGUF file (its magic is not 'GGUF') nor "
              "safetensors (a .safetensors file, or a folder with config.json and "
              "model*.safetensors)"));
  }
  ckpt->format_ = CheckpointFormat::kSafetensors;
  // The tensor files first: a malformed file is reported as such, not as a missing
  // config.json.
  ASSIGN_OR_RETURN(ckpt->safetensors_, SafetensorsReader::Open(path));
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path)
                                                  : fs::path(path).parent_path();
  const std::string config_path = (dir / kConfigFileName).string();
  if (!fs::exists(config_path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no ", kConfigFileName, " beside the safetensors data"));
  }
  ASSIGN_OR_RETURN(std::string config_text, ReadSmallFile(config_path, 1 << 20));
  ASSIGN_OR_RETURN(ckpt->config_, ConfigFromHfJson(config_text, config_path));
  ASSIGN_OR_RETURN(ckpt->tokenizer_, TokenizerInFolder(dir));
  if (ckpt->tokenizer_) {
    RETURN_IF_ERROR(ReconcileTokenizer(*ckpt->tokenizer_, path, &ckpt->config_));
  }
  ckpt->tensors_ = ckpt->safetensors_->tensors();
  ckpt->Index();
  return ckpt;
}

}  // namespace lrkv
