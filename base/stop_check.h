// A caller's request to stop long work (a cancelled job, a server shutting
// down), polled between units of work: a document, a window, a layer, a decode
// step.
#ifndef LRKV_BASE_STOP_CHECK_H_
#define LRKV_BASE_STOP_CHECK_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lrkv {

// True: stop now. Empty: never asked to stop.
using StopCheck = std::function<bool()>;

// Told as each stage of long work begins: what it is ("plane fp32 decoding"),
// and its place among the stages (step of total, 1-based). Empty: nobody
// listens.
using ProgressSink =
    std::function<void(const std::string& what, int64_t step, int64_t total)>;

// Told as each unit of a stage is done (a layer converted): how many of how
// many. Empty: nobody listens.
using UnitProgress = std::function<void(int64_t done, int64_t total)>;

// CancelledError naming `where` when `stop` asks to stop, else OK.
inline absl::Status CheckStop(const StopCheck& stop, absl::string_view where) {
  if (stop && stop())
    return absl::CancelledError(absl::StrCat("stopped during ", where));
  return absl::OkStatus();
}

}  // namespace lrkv

#endif  // LRKV_BASE_STOP_CHECK_H_
