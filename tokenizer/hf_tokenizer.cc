// The Hugging Face tokenizer pipeline (see hf_tokenizer.h).
#include "tokenizer/hf_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "base/json_limits.h"
#include "formats/checkpoint_files.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "base/status_macros.h"
#include "tokenizer/unicode_text.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::StatusOr<json> ParseJson(const std::string& text, const std::string& where) {
  ASSIGN_OR_RETURN(json j, ParseJsonBounded(text, kFileJsonLimits, where));
  if (!j.is_object()) return Invalid(absl::StrCat(where, ": not a JSON object"));
  return j;
}

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
absl::StatusOr<std::string> TokenText(const json& j, const std::string& where) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return Invalid(absl::StrCat(where, " must be a string or {\"content\": ...}, got ", j.dump()));
}

// The llama.cpp name (tokenizer.ggml.pre) of a byte-level pipeline, as
// gguf_tokenizer.cc writes each name back; "" and *why when llama.cpp has none.
std::string LlamaCppPreName(const json& j, std::string* why) {
  const json& pre = j.value("pre_tokenizer", json());
  std::vector<json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    for (const auto& s : pre.value("pretokenizers", json::array())) steps.push_back(s);
  } else if (!pre.is_null()) {
    steps.push_back(pre);
  }
  std::string split;
  bool byte_level = false, byte_level_regex = false, digits = false, other = false;
  for (const json& s : steps) {
    const std::string type = s.is_object() ? s.value("type", "") : "";
    if (type == "Split" && s.contains("pattern") && s["pattern"].is_object() &&
        s["pattern"].contains("Regex") && s.value("behavior", "") == "Isolated" &&
        split.empty()) {
      split = s["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      byte_level = true;
      byte_level_regex = s.value("use_regex", true);
    } else if (type == "Digits" && s.value("individual_digits", false)) {
      digits = true;
    } else {
      other = true;
    }
  }
  const json& norm = j.value("normalizer", json());
  if (!norm.is_null() && !(norm.is_object() && norm.value("type", "") == "NFC")) {
    *why = "its normalizer is neither absent nor NFC";
  } else if (!byte_level || other) {
    *why = "it is not a byte-level BPE pipeline llama.cpp names";
  } else if (split == kQwen2SplitRegex && !byte_level_regex && !digits) {
    return "qwen2";
  } else if (split == kLlama3SplitRegex && !byte_level_regex && !digits) {
    return "llama-bpe";
  } else if (split.empty() && byte_level_regex) {
    return digits ? "smollm" : "gpt-2";
  } else {
    *why = "its split pattern matches none of llama.cpp's pre-tokenizers";
  }
  return "";
}

}  // namespace

absl::Status HfTokenizer::ReadAddedTokens(const json& j,
                                          const std::string& tj) {
  std::vector<AddedToken> raw, normalized;
  const json& added = j.value("added_tokens", json::array());
  if (!added.is_array()) return Invalid(absl::StrCat(tj, ": 'added_tokens' must be a list"));
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string where = absl::StrCat(tj, ": added_tokens[", i, "]");
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string()) {
      return Invalid(absl::StrCat(where, " needs an integer 'id' and a string 'content'"));
    }
    AddedToken tok;
    tok.content = a["content"].get<std::string>();
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 24)) {
      return Invalid(absl::StrCat(where, " has id ", id, " outside [0, 2^24)"));
    }
    tok.id = static_cast<int32_t>(id);
    tok.special = a.value("special", false);
    tok.normalized = a.value("normalized", !tok.special);
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    tok.single_word = a.value("single_word", false);
    if (const auto model_id = model_->IdOf(tok.content);
        model_id && *model_id != tok.id) {
      return Invalid(absl::StrCat(where, " '", tok.content, "' has id ", tok.id,
                                  " but the vocab gives it ", *model_id));
    }
    size_ = std::max<int64_t>(size_, tok.id + 1);
    if (added_content_.size() <= static_cast<size_t>(tok.id)) {
      added_content_.resize(tok.id + 1);
      added_special_.resize(tok.id + 1, false);
    }
    added_content_[tok.id] = tok.content;
    added_special_[tok.id] = tok.special;
    (tok.normalized ? normalized : raw).push_back(std::move(tok));
  }
  raw_tokens_ = AddedTokenMatcher(raw);
  normalized_tokens_ = AddedTokenMatcher(normalized);

  return absl::OkStatus();
}

absl::Status HfTokenizer::ReadSpecialTokens(const json& j, const json& config,
                                            const std::string& tj,
                                            const std::string& tc) {
  // BOS / EOS: tokenizer_config.json names them; whether they are added comes from
  // add_bos_token / add_eos_token, else from a TemplateProcessing post-processor.
  auto id_of = [&](const std::string& text) -> std::optional<int32_t> {
    if (auto id = model_->IdOf(text)) return id;
    for (size_t id = 0; id < added_content_.size(); ++id) {
      if (added_content_[id] == text) return static_cast<int32_t>(id);
    }
    return std::nullopt;
  };
  bool template_bos = false, template_eos = false;
  const json& post = j.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "TemplateProcessing") {
    const json& single = post.value("single", json::array());
    auto special_at = [&](const json& item) -> std::optional<int32_t> {
      if (!item.is_object() || !item.contains("SpecialToken")) return std::nullopt;
      const json& st = item["SpecialToken"];
      if (!st.is_object() || !st.contains("id") || !st["id"].is_string()) return std::nullopt;
      return id_of(st["id"].get<std::string>());
    };
    if (single.is_array() && !single.empty()) {
      if (auto id = special_at(single.front())) {
        template_bos = true;
        specials_.bos_id = *id;
      }
      if (single.size() > 1) {
        if (auto id = special_at(single.back())) {
          template_eos = true;
          specials_.eos_id = *id;
        }
      }
    }
  }
  for (const char* field : {"bos_token", "eos_token"}) {
    auto it = config.find(field);
    if (it == config.end() || it->is_null()) continue;
    const std::string where = absl::StrCat(tc, ": '", field, "'");
    ASSIGN_OR_RETURN(std::string text, TokenText(*it, where));
    auto id = id_of(text);
    if (!id) {
      return Invalid(absl::StrCat(where, " is '", text, "', which is not a token of ", tj));
    }
    (std::string(field) == "bos_token" ? specials_.bos_id : specials_.eos_id) =
        *id;
  }
  for (auto [field, flag, fallback] :
       {std::tuple{"add_bos_token", &specials_.add_bos, template_bos},
        std::tuple{"add_eos_token", &specials_.add_eos, template_eos}}) {
    auto it = config.find(field);
    if (it == config.end() || it->is_null()) {
      *flag = fallback;
    } else if (it->is_boolean()) {
      *flag = it->get<bool>();
    } else {
      return Invalid(absl::StrCat(tc, ": '", field, "' must be true or false"));
    }
  }
  if (specials_.add_bos && specials_.bos_id < 0) {
    return Invalid(absl::StrCat(tc, ": add_bos_token is true but no bos_token is named"));
  }
  if (specials_.add_eos && specials_.eos_id < 0) {
    return Invalid(absl::StrCat(tc, ": add_eos_token is true but no eos_token is named"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(
    std::string tokenizer_json, std::string tokenizer_config,
    const std::string& source) {
  const std::string tj = absl::StrCat(source, "/", kHfTokenizerFileName);
  const std::string tc = absl::StrCat(source, "/", kHfTokenizerConfigFileName);
  ASSIGN_OR_RETURN(json j, ParseJson(tokenizer_json, tj));
  json config = json::object();
  if (!tokenizer_config.empty()) {
    ASSIGN_OR_RETURN(config, ParseJson(tokenizer_config, tc));
  }
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  if (!j.contains("model"))
    return Invalid(absl::StrCat(tj, ": missing 'model'"));
  ASSIGN_OR_RETURN(t->model_,
                   BpeModel::FromJson(j["model"], absl::StrCat(tj, ": model")));
  ASSIGN_OR_RETURN(t->normalizer_,
                   TextNormalizer::FromJson(j.value("normalizer", json()),
                                            absl::StrCat(tj, ": normalizer")));
  ASSIGN_OR_RETURN(t->pre_tokenizer_,
                   PreTokenizer::FromJson(j.value("pre_tokenizer", json()),
                                          absl::StrCat(tj, ": pre_tokenizer")));
  ASSIGN_OR_RETURN(t->decoder_,
                   TokenDecoder::FromJson(j.value("decoder", json()),
                                          absl::StrCat(tj, ": decoder")));
  t->size_ = t->model_->size();

  RETURN_IF_ERROR(t->ReadAddedTokens(j, tj));
  RETURN_IF_ERROR(t->ReadSpecialTokens(j, config, tj, tc));
  t->gguf_pre_ = LlamaCppPreName(j, &t->gguf_refusal_);
  if (t->gguf_pre_.empty() == false && !t->model_->byte_level_compatible()) {
    t->gguf_pre_.clear();
    t->gguf_refusal_ = "its BPE model uses byte fallback or subword affixes";
  }
  t->tokenizer_json_ = std::move(tokenizer_json);
  t->tokenizer_config_ = std::move(tokenizer_config);
  return t;
}

void HfTokenizer::EncodeNormalized(std::string_view section, bool at_text_start,
                                   std::vector<int32_t>* out) const {
  const std::string text = normalizer_.Apply(section);
  for (const TextSegment& seg : normalized_tokens_.Split(text)) {
    if (seg.token_id >= 0) {
      out->push_back(seg.token_id);
      continue;
    }
    const std::string_view plain = std::string_view(text).substr(seg.begin, seg.end - seg.begin);
    for (const std::string& piece : pre_tokenizer_.Split(plain, at_text_start && seg.begin == 0)) {
      model_->Encode(piece, out);
    }
  }
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view input) const {
  std::vector<int32_t> out;
  const std::string text = ToValidUtf8(input);
  for (const TextSegment& seg : raw_tokens_.Split(text)) {
    if (seg.token_id >= 0) {
      out.push_back(seg.token_id);
    } else {
      EncodeNormalized(std::string_view(text).substr(seg.begin, seg.end - seg.begin),
                       seg.begin == 0, &out);
    }
  }
  return out;
}

std::string HfTokenizer::Decode(const std::vector<int32_t>& ids, bool continuation) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < added_content_.size() &&
        !added_content_[id].empty()) {
      tokens.push_back(added_content_[id]);
    } else if (const std::string* t = model_->TokenOf(id)) {
      tokens.push_back(*t);
    }
  }
  return decoder_.Decode(std::move(tokens), continuation);
}

absl::StatusOr<GgufVocabulary> HfTokenizer::ToGgufVocabulary() const {
  if (gguf_pre_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this tokenizer.json has no GGUF form llama.cpp reads: ", gguf_refusal_));
  }
  GgufVocabulary g;
  g.model = "gpt2";
  g.pre = gguf_pre_;
  for (int64_t id = 0; id < size_; ++id) {
    const bool added = static_cast<size_t>(id) < added_content_.size() &&
                       !added_content_[id].empty();
    if (added) {
      g.tokens.push_back(added_content_[id]);
      g.types.push_back(static_cast<int32_t>(added_special_[id] ? TokenType::kControl
                                                                : TokenType::kUserDefined));
    } else if (const std::string* t = model_->TokenOf(static_cast<int32_t>(id))) {
      g.tokens.push_back(*t);
      g.types.push_back(static_cast<int32_t>(TokenType::kNormal));
    } else {
      g.tokens.push_back(absl::StrCat("[PAD", id, "]"));  // an id nothing produces
      g.types.push_back(static_cast<int32_t>(TokenType::kUnused));
    }
  }
  g.merges = model_->MergesInRankOrder();
  return g;
}

std::vector<TokenizerFile> HfTokenizer::Files() const {
  std::vector<TokenizerFile> files = {{kHfTokenizerFileName, tokenizer_json_}};
  if (!tokenizer_config_.empty()) {
    files.push_back({kHfTokenizerConfigFileName, tokenizer_config_});
  }
  return files;
}

}  // namespace lrkv
