// The tokenizer front: picks the implementation for a file (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "base/status_macros.h"
#include "tokenizer/unicode_text.h"

namespace lrkv {

absl::StatusOr<Tokenizer> Tokenizer::Create(Vocabulary vocab) {
  ASSIGN_OR_RETURN(std::shared_ptr<const TokenizerBackend> spm,
                   SpmTokenizer::Create(std::move(vocab)));
  return Tokenizer(std::move(spm));
}

absl::StatusOr<Tokenizer> Tokenizer::FromGguf(const GgufContents& g) {
  auto model = GgufString(g, "tokenizer.ggml.model");
  if (!model.ok()) {
    return absl::InvalidArgumentError("GGUF has no tokenizer (tokenizer.ggml.model)");
  }
  if (*model == "llama") {
    ASSIGN_OR_RETURN(std::shared_ptr<const TokenizerBackend> spm, SpmTokenizer::FromGguf(g));
    return Tokenizer(std::move(spm));
  }
  if (*model == "gpt2") {
    ASSIGN_OR_RETURN(auto files, HfFilesFromGgufBpe(g));
    return FromHfFiles(std::move(files.first), std::move(files.second), "GGUF tokenizer");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer model '", *model,
                   "' (tokenizer.ggml.model) is not supported (supported: llama, gpt2)"));
}

absl::StatusOr<Tokenizer> Tokenizer::FromJson(const std::string& text,
                                              const std::string& source) {
  ASSIGN_OR_RETURN(std::shared_ptr<const TokenizerBackend> spm,
                   SpmTokenizer::FromJson(text, source));
  return Tokenizer(std::move(spm));
}

absl::StatusOr<Tokenizer> Tokenizer::FromHfFiles(const std::string& tokenizer_json,
                                                 const std::string& tokenizer_config,
                                                 const std::string& source) {
  ASSIGN_OR_RETURN(std::shared_ptr<const TokenizerBackend> hf,
                   HfTokenizer::Create(tokenizer_json, tokenizer_config, source));
  return Tokenizer(std::move(hf));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> ids = backend_->Encode(text);
  if (add_special) {
    const SpecialTokens& s = specials();
    if (s.add_bos) ids.insert(ids.begin(), s.bos_id);
    if (s.add_eos) ids.push_back(s.eos_id);
  }
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  return ToValidUtf8(backend_->Decode(ids, /*continuation=*/false));
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  return backend_->Decode({id}, /*continuation=*/true);
}

int32_t Tokenizer::document_start_id() const {
  const SpecialTokens& s = specials();
  return s.bos_id >= 0 ? s.bos_id : s.eos_id;
}

}  // namespace lrkv
