// The text of a generated sequence as it grows, token by token, for a streaming
// response: only whole UTF-8 characters leave it, and text that could be the
// start of a stop sequence is held back until the next token settles it. When a
// stop sequence appears, the text before it is the last to leave (the stop text
// itself never does, as in the OpenAI API).
#ifndef LRKV_SERVE_TEXT_STREAM_H_
#define LRKV_SERVE_TEXT_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lrkv {

class TextStream {
 public:
  // `tokenizer` must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops);

  // Appends a token; returns the text that may now be sent (possibly empty).
  std::string Push(int32_t id);
  // At the end of the sequence: what is still held back. Empty after a stop
  // sequence.
  std::string Finish();
  // Whether a stop sequence has appeared (nothing more will be sent).
  bool stopped() const { return stopped_; }

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  std::string held_;  // bytes not sent yet
  bool stopped_ = false;
};

// The length of the longest prefix of `bytes` that ends on a UTF-8 character
// boundary (a trailing incomplete sequence excluded).
size_t CompleteUtf8Prefix(const std::string& bytes);

}  // namespace lrkv

#endif  // LRKV_SERVE_TEXT_STREAM_H_
