// libFuzzer target: the GGUF parser, and the config and tokenizer built from its
// metadata, must reject or accept any input without reading outside it.
#include <cstddef>
#include <cstdint>

#include "formats/config.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = lrkv::ParseGguf(absl::Span<const uint8_t>(data, size));
  if (!parsed.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : parsed->tensors) {
    for (uint64_t i = 0; i < t.nbytes; ++i) sink ^= t.data[i];
  }
  (void)lrkv::ConfigFromGguf(*parsed);
  auto tok = lrkv::Tokenizer::FromGguf(*parsed);
  if (tok.ok()) {
    const auto ids = tok->Encode("Once upon a time, \xc3\xa9 <s>");
    (void)tok->Decode(ids);
  }
  return 0;
}
