// Added-token matching (see added_tokens.h).
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_text.h"

namespace lrkv {
namespace {

const Regex& WordChar() {
  static const Regex* re = new Regex(*Regex::Create("\\A[\\p{L}\\p{N}_]"));
  return *re;
}
const Regex& LeadingSpace() {
  static const Regex* re = new Regex(*Regex::Create("\\A\\s+"));
  return *re;
}
const Regex& TrailingSpace() {
  static const Regex* re = new Regex(*Regex::Create("\\s+\\z"));
  return *re;
}

bool IsWordCharAt(std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  size_t end = pos;
  NextCodepoint(text, &end);
  return !WordChar().FindAll(text.substr(pos, end - pos)).empty();
}

// Start of the character before `pos`.
size_t PreviousChar(std::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xc0) == 0x80);
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  nodes_.emplace_back();
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : t.content) {
      int32_t next = Child(node, c);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        auto& ch = nodes_[node].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t{-1})),
                  {c, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(t);
    }
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char c) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t{-1}));
  return it != ch.end() && it->first == c ? it->second : -1;
}

std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSegment> out;
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return out;
  }
  size_t plain = 0;  // start of the pending plain text
  for (size_t i = 0; i < text.size();) {
    // The longest token starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < text.size(); ++k) {
      node = Child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens_[best];
    if (t.single_word && ((i > 0 && IsWordCharAt(text, PreviousChar(text, i))) ||
                          IsWordCharAt(text, best_end))) {
      ++i;
      continue;
    }
    size_t begin = i, end = best_end;
    if (t.lstrip && begin > plain) {
      const auto runs = TrailingSpace().FindAll(text.substr(plain, begin - plain));
      if (!runs.empty()) begin = plain + runs.back().first;
    }
    if (t.rstrip) {
      const auto runs = LeadingSpace().FindAll(text.substr(end));
      if (!runs.empty()) end += runs.front().second;
    }
    if (begin > plain) out.push_back({plain, begin, -1});
    out.push_back({begin, end, t.id});
    plain = i = end;
  }
  if (plain < text.size()) out.push_back({plain, text.size(), -1});
  return out;
}

}  // namespace lrkv
