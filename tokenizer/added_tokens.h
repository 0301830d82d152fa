// The added tokens of a tokenizer.json (special tokens such as <|endoftext|>, and
// user-defined ones): found in the text before pre-tokenization and never split,
// leftmost-longest like the Rust crate's Aho-Corasick matcher, with the lstrip,
// rstrip and single_word options.
#ifndef LRKV_TOKENIZER_ADDED_TOKENS_H_
#define LRKV_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lrkv {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  /// Matched in the normalized text (true) or the raw text (false).
  bool normalized = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

// One part of a text: plain text to tokenize, or an added token.
struct TextSegment {
  size_t begin, end;
  int32_t token_id;  // -1 for plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);
  // Cuts `text` into plain-text and added-token segments, in order.
  std::vector<TextSegment> Split(std::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  int32_t Child(int32_t node, unsigned char c) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_ADDED_TOKENS_H_
