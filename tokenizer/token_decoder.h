// The "decoder" of a tokenizer.json: how token strings become text again
// (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence), as a chain
// over the list of token strings like the Rust crate's decode_chain.
#ifndef LRKV_TOKENIZER_TOKEN_DECODER_H_
#define LRKV_TOKENIZER_TOKEN_DECODER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"
#include "nlohmann/json_fwd.hpp"

namespace lrkv {

class TokenDecoder {
 public:
  // From the decoder value (null: token strings are concatenated).
  static absl::StatusOr<TokenDecoder> FromJson(const nlohmann::json& j,
                                               const std::string& where);
  // The bytes of `tokens`. `continuation`: they follow earlier tokens, so the
  // rules for the first token of a text (Metaspace's and Strip's leading space)
  // do not apply.
  std::string Decode(std::vector<std::string> tokens, bool continuation) const;

 private:
  struct Step {
    enum Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } kind;
    std::string replacement;  // kMetaspace: the character; kStrip: the content
    bool strip_first = true;  // kMetaspace: drop the prepended space of token 0
    Regex pattern = Regex::Literal("");
    std::string content;      // kReplace
    int start = 0, stop = 0;  // kStrip
  };
  static absl::Status Add(const nlohmann::json& j, const std::string& where,
                          std::vector<Step>* steps);
  std::vector<Step> steps_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_TOKEN_DECODER_H_
