// A local command's progress on stderr (stdout stays the result's).
#ifndef LRKV_CLIENTS_CLI_STAGE_PROGRESS_H_
#define LRKV_CLIENTS_CLI_STAGE_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "base/stop_check.h"

namespace lrkv::cli {

// A command's stages, and the units of the current one (layers) with the time
// left at the rate so far: a bar redrawn in place on a TTY, finished with a
// newline when the command ends; plain lines otherwise or with
// LRKV_NO_PROGRESS=1. Never silent for long: a TTY's bar is redrawn every
// second, and in plain mode a line repeats the current stage every
// LRKV_PROGRESS_EVERY seconds (default 10) it has run without one.
class StageProgress {
 public:
  explicit StageProgress(std::string command);
  ~StageProgress();
  StageProgress(const StageProgress&) = delete;
  StageProgress& operator=(const StageProgress&) = delete;

  // Told as each stage begins.
  ProgressSink Sink();
  // Told as each unit of the current stage is done.
  UnitProgress Units();
  // Ends the bar's line and the repeating lines (before the result is printed);
  // the destructor does it too.
  void Finish();

 private:
  using Clock = std::chrono::steady_clock;
  // The current stage's line (without the bar), under mu_.
  std::string Line(Clock::time_point now) const;
  // Draws the bar or prints a plain line (the stage's first, or a repeat),
  // under mu_.
  void Show(Clock::time_point now, bool stage_begins);
  void Heartbeat();

  const std::string command_;
  const bool bar_;
  const Clock::time_point start_;
  std::chrono::milliseconds every_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool drawn_ = false, finished_ = false;
  std::string stage_;
  int64_t step_ = 0, total_ = 0, units_done_ = 0, units_total_ = 0;
  Clock::time_point stage_start_, last_shown_;
  std::thread heartbeat_;
};

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_STAGE_PROGRESS_H_
