// The names of the files a safetensors checkpoint folder holds besides its weights.
#ifndef LRKV_FORMATS_CHECKPOINT_FILES_H_
#define LRKV_FORMATS_CHECKPOINT_FILES_H_

namespace lrkv {

inline constexpr char kConfigFileName[] = "config.json";
// Hugging Face tokenizers (read first when present).
inline constexpr char kHfTokenizerFileName[] = "tokenizer.json";
inline constexpr char kHfTokenizerConfigFileName[] = "tokenizer_config.json";
// Our SentencePiece vocabulary, written for checkpoints that came from a GGUF file.
inline constexpr char kTokenizerFileName[] = "tokenizer.lrkv.json";

}  // namespace lrkv

#endif  // LRKV_FORMATS_CHECKPOINT_FILES_H_
