// libFuzzer target: a job's params_json as a client may send it. Parsing refuses or
// accepts any bytes within the request limits without recursing on the client's
// nesting (a stack overflow is a crash here), and what it accepts reaches no path with
// a NUL in it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "service/params_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = lrkv::service::ParseParamsJson(text);
  if (parsed.ok()) (void)parsed->dump();
  auto replaced = lrkv::service::ReplaceInputPaths(
      text, lrkv::service::kTextInputKeys,
      [](const std::string& path) -> absl::StatusOr<std::string> {
        if (path.find('\0') != std::string::npos) std::abort();  // a NUL reached a path
        return "/staged/" + path;
      });
  // Both parse the same text: they accept and refuse alike.
  if (parsed.ok() != replaced.ok()) std::abort();
  return 0;
}
