// A GGUF `gpt2` vocabulary (tokens, token types, merges, tokenizer.ggml.pre) written
// as the tokenizer.json / tokenizer_config.json pair it stands for, so that it runs
// through the same pipeline as a Hugging Face tokenizer and exports as one.
#ifndef LRKV_TOKENIZER_GGUF_TOKENIZER_H_
#define LRKV_TOKENIZER_GGUF_TOKENIZER_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "formats/gguf.h"

namespace lrkv {

// The pre-tokenizer names (tokenizer.ggml.pre) this conversion knows.
inline constexpr char kSupportedGgufPreTokenizers[] = "gpt-2, llama-bpe, llama3, qwen2, smollm";

// {tokenizer.json, tokenizer_config.json} texts; InvalidArgument naming the key
// when the metadata is missing, inconsistent or names an unknown pre-tokenizer.
absl::StatusOr<std::pair<std::string, std::string>> HfFilesFromGgufBpe(const GgufContents& g);

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_GGUF_TOKENIZER_H_
