// The BPE model of a tokenizer.json (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kCachedPieceBytes = 256;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Symbol {
  int32_t id;
  int prev, next;
  bool alive;
};

struct Merge {
  int pos;
  int32_t rank;
  int32_t new_id;
};

struct MergeOrder {
  // Lowest rank first; among equal ranks the leftmost position.
  bool operator()(const Merge& a, const Merge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

absl::StatusOr<std::string> OptionalString(const json& j, const char* field,
                                           const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Invalid(absl::StrCat(where, ": '", field, "' must be a string"));
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& j,
                                                             const std::string& where) {
  if (!j.is_object()) return Invalid(absl::StrCat(where, ": must be an object"));
  const std::string type = j.value("type", std::string("BPE"));
  if (type != "BPE") {
    return Invalid(absl::StrCat(where, ": model type '", type,
                                "' is not supported (only BPE; WordPiece, WordLevel and "
                                "Unigram tokenizers are not)"));
  }
  if (auto d = j.find("dropout"); d != j.end() && !d->is_null() && d->is_number() &&
                                  d->get<double>() != 0.0) {
    return Invalid(absl::StrCat(where, ": BPE dropout ", d->dump(),
                                " makes encoding random; only null or 0 is supported"));
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  const auto& vocab = j.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) {
    return Invalid(absl::StrCat(where, ": 'vocab' must be a non-empty object of token: id"));
  }
  m->vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= (int64_t{1} << 24)) {
      return Invalid(absl::StrCat(where, ": vocab entry '", it.key(), "' has id ",
                                  it.value().dump(), " (must be an integer in [0, 2^24))"));
    }
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    if (static_cast<size_t>(id) >= m->id_to_token_.size()) {
      m->id_to_token_.resize(id + 1);
      m->has_id_.resize(id + 1, false);
    }
    if (m->has_id_[id]) {
      return Invalid(absl::StrCat(where, ": vocab id ", id, " is given to both '",
                                  m->id_to_token_[id], "' and '", it.key(), "'"));
    }
    m->has_id_[id] = true;
    m->id_to_token_[id] = it.key();
    m->vocab_.emplace(it.key(), id);
  }
  ASSIGN_OR_RETURN(m->prefix_, OptionalString(j, "continuing_subword_prefix", where));
  ASSIGN_OR_RETURN(m->suffix_, OptionalString(j, "end_of_word_suffix", where));
  ASSIGN_OR_RETURN(std::string unk, OptionalString(j, "unk_token", where));
  if (!unk.empty()) {
    auto id = m->IdOf(unk);
    if (!id) return Invalid(absl::StrCat(where, ": unk_token '", unk, "' is not in the vocab"));
    m->unk_id_ = *id;
  }
  m->fuse_unk_ = j.value("fuse_unk", false);
  m->byte_fallback_ = j.value("byte_fallback", false);
  m->ignore_merges_ = j.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m->byte_ids_[b] = m->IdOf(name).value_or(-1);
  }
  const auto& merges = j.value("merges", json::array());
  if (!merges.is_array()) return Invalid(absl::StrCat(where, ": 'merges' must be a list"));
  m->merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& entry = merges[i];
    std::string a, b;
    if (entry.is_string()) {
      const std::string s = entry.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Invalid(absl::StrCat(where, ": merges[", i, "] '", s,
                                    "' is not two tokens separated by one space"));
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      a = entry[0].get<std::string>();
      b = entry[1].get<std::string>();
    } else {
      return Invalid(absl::StrCat(where, ": merges[", i, "] is ", entry.dump(),
                                  " (expected \"a b\" or [\"a\", \"b\"])"));
    }
    const auto ia = m->IdOf(a), ib = m->IdOf(b);
    if (b.compare(0, m->prefix_.size(), m->prefix_) != 0 && !m->prefix_.empty()) {
      return Invalid(absl::StrCat(where, ": merges[", i, "] right token '", b,
                                  "' lacks the continuing_subword_prefix"));
    }
    const auto merged = m->IdOf(a + b.substr(m->prefix_.size()));
    if (!ia || !ib || !merged) {
      return Invalid(absl::StrCat(where, ": merges[", i, "] ('", a, "', '", b,
                                  "') uses or makes a token that is not in the vocab"));
    }
    m->merges_[PairKey(*ia, *ib)] = {static_cast<int32_t>(i), *merged};
  }
  return m;
}

std::vector<std::string> BpeModel::MergesInRankOrder() const {
  std::vector<std::pair<int32_t, uint64_t>> ranked;
  ranked.reserve(merges_.size());
  for (const auto& [pair, merge] : merges_) ranked.emplace_back(merge.first, pair);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  out.reserve(ranked.size());
  for (const auto& [rank, pair] : ranked) {
    out.push_back(id_to_token_[pair >> 32] + " " + id_to_token_[pair & 0xffffffffu]);
  }
  return out;
}

std::optional<int32_t> BpeModel::IdOf(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::TokenOf(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Encode(const std::string& piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = IdOf(piece)) {
      out->push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() <= kCachedPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  MergeWord(piece, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(piece, std::move(ids));
  }
}

void BpeModel::MergeWord(std::string_view w, std::vector<int32_t>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](int32_t id) {
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({id, idx - 1, idx + 1, true});
  };
  // A pending unknown token, so that fuse_unk can extend it over several characters.
  bool unk_pending = false;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    const size_t len = std::min(Utf8SequenceLength(static_cast<unsigned char>(w[i])),
                                w.size() - i);
    const bool last = i + len == w.size();
    s.assign(i > 0 ? prefix_ : std::string());
    s.append(w.substr(i, len));
    if (last) s += suffix_;
    i += len;
    if (auto id = IdOf(s)) {
      if (unk_pending) add(*unk_id_);
      unk_pending = false;
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : s) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      // As the Rust crate: with fuse_unk consecutive unknowns become one token.
      if (unk_pending && !fuse_unk_) add(*unk_id_);
      unk_pending = true;
    }
  }
  if (unk_pending) add(*unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Merge, std::vector<Merge>, MergeOrder> queue;
  auto push = [&](int pos) {
    const int next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({pos, it->second.first, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push(i);
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace lrkv
