// libFuzzer target: an upload's header (ValidateUploadHeader) with every field drawn
// from the input: ids, file names, sizes, and config/tokenizer JSON of any shape or
// depth are accepted or refused without a crash, and what is accepted holds the
// invariants the receiver relies on.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "service/upload_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  lrkv::service::UploadHeaderInfo h;
  h.upload_id = in.ConsumeRandomLengthString(160);
  h.file_name = in.ConsumeRandomLengthString(300);
  h.total_bytes = in.ConsumeIntegral<int64_t>();
  h.config_json = in.ConsumeRandomLengthString(size);
  h.tokenizer_json = in.ConsumeBytesAsString(in.remaining_bytes());
  const absl::Status st = lrkv::service::ValidateUploadHeader(h, int64_t{1} << 30);
  if (st.ok()) {
    // The receiver builds staging paths from these: they must be plain and bounded.
    if (!lrkv::service::ValidUploadId(h.upload_id)) std::abort();
    if (h.file_name.find('/') != std::string::npos) std::abort();
    if (h.file_name.find('\0') != std::string::npos) std::abort();
    if (h.total_bytes < 1 || h.total_bytes > (int64_t{1} << 30)) std::abort();
  }
  return 0;
}
