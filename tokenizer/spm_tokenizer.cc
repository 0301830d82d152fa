// The SentencePiece BPE tokenizer over a GGUF vocabulary (see spm_tokenizer.h).
#include "tokenizer/spm_tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <queue>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint_files.h"
#include "base/json_limits.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // "▁", U+2581

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string ByteToPiece(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

struct Symbol {
  int prev;
  int next;
  size_t start;  // byte offset into the normalized text
  size_t len;    // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t len;
};

struct BigramOrder {
  // Highest score first; among equal scores the leftmost pair.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {
  specials_ = {vocab_.bos_id, vocab_.eos_id, vocab_.add_bos, false};
  for (size_t i = 0; i < vocab_.pieces.size(); ++i) {
    piece_to_id_.emplace(vocab_.pieces[i], static_cast<int32_t>(i));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = piece_to_id_.find(ByteToPiece(static_cast<unsigned char>(b)));
    byte_ids_[b] = it == piece_to_id_.end() ? vocab_.unk_id : it->second;
  }
}

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::Create(Vocabulary v) {
  const size_t n = v.pieces.size();
  if (n == 0) return Invalid("tokenizer vocabulary is empty");
  if (v.scores.empty()) v.scores.assign(n, 0.0f);
  if (v.types.empty()) v.types.assign(n, TokenType::kNormal);
  if (v.scores.size() != n || v.types.size() != n) {
    return Invalid(absl::StrCat("tokenizer has ", n, " pieces but ", v.scores.size(),
                                " scores and ", v.types.size(), " token types"));
  }
  for (int32_t id : {v.bos_id, v.eos_id, v.unk_id}) {
    if (id < 0 || static_cast<size_t>(id) >= n) {
      return Invalid(absl::StrCat("tokenizer special token id ", id,
                                  " is outside the vocabulary of ", n));
    }
  }
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < n; ++i) {
    if (!seen.emplace(v.pieces[i], i).second) {
      return Invalid(absl::StrCat("tokenizer piece '", v.pieces[i], "' appears twice (ids ",
                                  seen[v.pieces[i]], " and ", i, ")"));
    }
    const auto t = static_cast<int32_t>(v.types[i]);
    if (t < 1 || t > 6) {
      return Invalid(absl::StrCat("tokenizer token ", i, " has unknown type ", t));
    }
  }
  return std::unique_ptr<SpmTokenizer>(new SpmTokenizer(std::move(v)));
}

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::FromGguf(const GgufContents& g) {
  auto model = GgufString(g, "tokenizer.ggml.model");
  if (!model.ok()) return Invalid("GGUF has no tokenizer (tokenizer.ggml.model)");
  if (*model != "llama") {
    return Invalid(absl::StrCat("tokenizer model '", *model,
                                "' (tokenizer.ggml.model) is not supported; only the "
                                "SentencePiece 'llama' vocabulary"));
  }
  Vocabulary v;
  auto tokens = g.metadata.find("tokenizer.ggml.tokens");
  if (tokens == g.metadata.end() || !tokens->second.is_array) {
    return Invalid("GGUF metadata 'tokenizer.ggml.tokens' is missing or not an array");
  }
  for (const auto& s : tokens->second.array) {
    const auto* str = std::get_if<std::string>(&s);
    if (str == nullptr) return Invalid("tokenizer.ggml.tokens holds a non-string");
    v.pieces.push_back(*str);
  }
  if (auto it = g.metadata.find("tokenizer.ggml.scores"); it != g.metadata.end()) {
    for (const auto& s : it->second.array) {
      const auto* d = std::get_if<double>(&s);
      if (d == nullptr) return Invalid("tokenizer.ggml.scores holds a non-number");
      v.scores.push_back(static_cast<float>(*d));
    }
  }
  if (auto it = g.metadata.find("tokenizer.ggml.token_type"); it != g.metadata.end()) {
    for (const auto& s : it->second.array) {
      int64_t t = -1;
      if (const auto* i = std::get_if<int64_t>(&s)) t = *i;
      if (const auto* u = std::get_if<uint64_t>(&s)) t = static_cast<int64_t>(*u);
      v.types.push_back(static_cast<TokenType>(t));
    }
  }
  if (auto x = GgufUint(g, "tokenizer.ggml.bos_token_id"); x.ok()) v.bos_id = *x;
  if (auto x = GgufUint(g, "tokenizer.ggml.eos_token_id"); x.ok()) v.eos_id = *x;
  if (auto x = GgufUint(g, "tokenizer.ggml.unknown_token_id"); x.ok()) v.unk_id = *x;
  if (auto x = GgufBool(g, "tokenizer.ggml.add_bos_token"); x.ok()) v.add_bos = *x;
  if (auto x = GgufBool(g, "tokenizer.ggml.add_space_prefix"); x.ok()) {
    v.add_space_prefix = *x;
  }
  return Create(std::move(v));
}

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::FromJson(
    const std::string& text, const std::string& source) {
  using nlohmann::json;
  ASSIGN_OR_RETURN(const json j, ParseJsonBounded(text, kFileJsonLimits, source));
  try {
    if (j.value("model", std::string()) != "sentencepiece-bpe") {
      return Invalid(absl::StrCat(source, ": field 'model' must be 'sentencepiece-bpe'"));
    }
    Vocabulary v;
    v.pieces = j.at("pieces").get<std::vector<std::string>>();
    v.scores = j.at("scores").get<std::vector<float>>();
    for (int32_t t : j.at("types").get<std::vector<int32_t>>()) {
      v.types.push_back(static_cast<TokenType>(t));
    }
    v.bos_id = j.at("bos_id").get<int32_t>();
    v.eos_id = j.at("eos_id").get<int32_t>();
    v.unk_id = j.at("unk_id").get<int32_t>();
    v.add_space_prefix = j.at("add_space_prefix").get<bool>();
    v.add_bos = j.at("add_bos").get<bool>();
    auto t = Create(std::move(v));
    if (!t.ok()) return Invalid(absl::StrCat(source, ": ", t.status().message()));
    return t;
  } catch (const json::exception& e) {
    return Invalid(absl::StrCat(source, ": bad tokenizer file: ", e.what()));
  }
}

std::vector<TokenizerFile> SpmTokenizer::Files() const {
  return {{kTokenizerFileName, ToJson()}};
}

absl::StatusOr<GgufVocabulary> SpmTokenizer::ToGgufVocabulary() const {
  GgufVocabulary g;
  g.model = "llama";
  g.tokens = vocab_.pieces;
  g.scores = vocab_.scores;
  for (TokenType t : vocab_.types) g.types.push_back(static_cast<int32_t>(t));
  g.unk_id = vocab_.unk_id;
  g.add_space_prefix = vocab_.add_space_prefix;
  return g;
}

std::string SpmTokenizer::ToJson() const {
  nlohmann::json j;
  j["model"] = "sentencepiece-bpe";
  j["pieces"] = vocab_.pieces;
  j["scores"] = vocab_.scores;
  std::vector<int32_t> types;
  for (auto t : vocab_.types) types.push_back(static_cast<int32_t>(t));
  j["types"] = types;
  j["bos_id"] = vocab_.bos_id;
  j["eos_id"] = vocab_.eos_id;
  j["unk_id"] = vocab_.unk_id;
  j["add_space_prefix"] = vocab_.add_space_prefix;
  j["add_bos"] = vocab_.add_bos;
  return j.dump() + "\n";
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view raw) const {
  std::vector<int32_t> out;
  if (raw.empty()) return out;
  std::string text;
  text.reserve(raw.size() * 2 + kSpace.size());
  if (vocab_.add_space_prefix) text += kSpace;
  for (char ch : raw) {
    if (ch == ' ') {
      text += kSpace;
    } else {
      text += ch;
    }
  }
  std::vector<Symbol> symbols;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(Utf8SequenceLength(static_cast<unsigned char>(text[off])),
                                text.size() - off);
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, idx + 1, off, len});
    off += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = symbols[left].len + symbols[right].len;
    auto it = piece_to_id_.find(std::string(text, symbols[left].start, len));
    if (it == piece_to_id_.end()) return;
    queue.push({left, right, vocab_.scores[it->second], len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    // A pair is stale once either side has been merged into something else.
    if (left.len == 0 || right.len == 0 || left.len + right.len != b.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    auto it = piece_to_id_.find(std::string(text, s.start, s.len));
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Only single characters can be missing (merges form vocabulary pieces):
    // fall back to one byte token per UTF-8 byte.
    for (size_t k = 0; k < s.len; ++k) {
      out.push_back(byte_ids_[static_cast<unsigned char>(text[s.start + k])]);
    }
  }
  return out;
}

void SpmTokenizer::AppendPiece(int32_t id, std::string* out) const {
  if (id < 0 || id >= size()) return;
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.types[id]) {
    case TokenType::kNormal: {
      for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, kSpace.size(), kSpace) == 0) {
          out->push_back(' ');
          i += kSpace.size();
        } else {
          out->push_back(piece[i++]);
        }
      }
      return;
    }
    case TokenType::kUnknown:
      *out += "\xe2\x96\x85";  // "▅", as llama.cpp prints unknown tokens
      return;
    case TokenType::kByte:
      if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') {
        char* end = nullptr;
        const std::string hex = piece.substr(3, 2);
        const long b = std::strtol(hex.c_str(), &end, 16);
        if (end == hex.c_str() + 2) out->push_back(static_cast<char>(b));
      }
      return;
    case TokenType::kUserDefined:
      *out += piece;
      return;
    case TokenType::kControl:
    case TokenType::kUnused:
      return;
  }
}

std::string SpmTokenizer::Decode(const std::vector<int32_t>& ids,
                                 bool continuation) const {
  std::string out;
  bool first = !continuation;
  for (int32_t id : ids) {
    if (id >= 0 && id < size() && vocab_.types[id] == TokenType::kControl) continue;
    const size_t before = out.size();
    AppendPiece(id, &out);
    if (first && vocab_.add_space_prefix && out.size() > before && out[before] == ' ') {
      out.erase(before, 1);
    }
    first = false;
  }
  return out;
}

}  // namespace lrkv
