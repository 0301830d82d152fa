// GGUF gpt2 vocabularies as tokenizer.json (see gguf_tokenizer.h).
#include "tokenizer/gguf_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::StatusOr<std::vector<std::string>> Strings(const GgufContents& g, const std::string& key) {
  auto it = g.metadata.find(key);
  if (it == g.metadata.end() || !it->second.is_array) {
    return Invalid(absl::StrCat("GGUF metadata '", key, "' is missing or not an array"));
  }
  std::vector<std::string> out;
  out.reserve(it->second.array.size());
  for (const auto& v : it->second.array) {
    const auto* s = std::get_if<std::string>(&v);
    if (s == nullptr) return Invalid(absl::StrCat("GGUF metadata '", key, "' holds a non-string"));
    out.push_back(*s);
  }
  return out;
}

json SplitThenBytes(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", false},
             {"use_regex", false}}}}};
}

}  // namespace

absl::StatusOr<std::pair<std::string, std::string>> HfFilesFromGgufBpe(const GgufContents& g) {
  ASSIGN_OR_RETURN(std::vector<std::string> tokens, Strings(g, "tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(std::vector<std::string> merges, Strings(g, "tokenizer.ggml.merges"));
  std::vector<int64_t> types(tokens.size(), static_cast<int64_t>(TokenType::kNormal));
  if (auto it = g.metadata.find("tokenizer.ggml.token_type"); it != g.metadata.end()) {
    if (!it->second.is_array || it->second.array.size() != tokens.size()) {
      return Invalid(absl::StrCat("GGUF metadata 'tokenizer.ggml.token_type' must list one type "
                                  "per token (", tokens.size(), ")"));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto& v = it->second.array[i];
      if (const auto* s = std::get_if<int64_t>(&v)) types[i] = *s;
      if (const auto* u = std::get_if<uint64_t>(&v)) types[i] = static_cast<int64_t>(*u);
    }
  }
  auto pre = GgufString(g, "tokenizer.ggml.pre");
  const std::string pre_name = pre.ok() ? *pre : "gpt-2";
  json pre_tokenizer;
  bool ignore_merges = false;
  if (pre_name == "gpt-2") {
    pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                     {"trim_offsets", true}, {"use_regex", true}};
  } else if (pre_name == "llama-bpe" || pre_name == "llama3") {
    pre_tokenizer = SplitThenBytes(kLlama3SplitRegex);
    ignore_merges = true;
  } else if (pre_name == "qwen2") {
    pre_tokenizer = SplitThenBytes(kQwen2SplitRegex);
  } else if (pre_name == "smollm") {
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Digits"}, {"individual_digits", true}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false},
                        {"trim_offsets", true}, {"use_regex", true}}}}};
  } else {
    return Invalid(absl::StrCat("GGUF metadata 'tokenizer.ggml.pre' = '", pre_name,
                                "' is not a supported pre-tokenizer (supported: ",
                                kSupportedGgufPreTokenizers, ")"));
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    const auto type = static_cast<TokenType>(types[i]);
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false},
                       {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                       {"special", type == TokenType::kControl}});
    }
  }
  json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true},
                   {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}}},
  };
  json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  for (auto [key, field] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                            std::pair{"tokenizer.ggml.eos_token_id", "eos_token"}}) {
    if (auto id = GgufUint(g, key); id.ok()) {
      if (*id >= tokens.size()) {
        return Invalid(absl::StrCat("GGUF metadata '", key, "' = ", *id,
                                    " is outside the vocabulary of ", tokens.size()));
      }
      config[field] = tokens[*id];
    }
  }
  for (auto [key, field] : {std::pair{"tokenizer.ggml.add_bos_token", "add_bos_token"},
                            std::pair{"tokenizer.ggml.add_eos_token", "add_eos_token"}}) {
    if (auto v = GgufBool(g, key); v.ok()) config[field] = *v;
  }
  // The chat template travels as tokenizer_config.json's (lrkv serve renders it).
  if (auto t = GgufString(g, "tokenizer.chat_template"); t.ok()) config["chat_template"] = *t;
  return std::pair{tokenizer.dump(), config.dump(2)};
}

}  // namespace lrkv
