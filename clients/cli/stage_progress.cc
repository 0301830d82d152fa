// A local command's progress on stderr (see the header).
#include "clients/cli/stage_progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lrkv::cli {
namespace {

// Plain mode's repeat interval: LRKV_PROGRESS_EVERY seconds (tests set it
// short).
std::chrono::milliseconds PlainInterval() {
  double seconds = 10;
  const char* env = std::getenv("LRKV_PROGRESS_EVERY");
  if (env != nullptr && !(absl::SimpleAtod(env, &seconds) && seconds > 0))
    seconds = 10;
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

StageProgress::StageProgress(std::string command)
    : command_(std::move(command)),
      bar_(isatty(STDERR_FILENO) && std::getenv("LRKV_NO_PROGRESS") == nullptr),
      start_(Clock::now()),
      every_(bar_ ? std::chrono::milliseconds(1000) : PlainInterval()),
      stage_start_(start_),
      last_shown_(start_) {
  heartbeat_ = std::thread([this] { Heartbeat(); });
}

StageProgress::~StageProgress() { Finish(); }

void StageProgress::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (bar_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

ProgressSink StageProgress::Sink() {
  return [this](const std::string& what, int64_t step, int64_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    stage_ = what;
    step_ = step;
    total_ = total;
    units_done_ = units_total_ = 0;
    stage_start_ = Clock::now();
    Show(stage_start_, true);
  };
}

UnitProgress StageProgress::Units() {
  return [this](int64_t done, int64_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    units_done_ = done;
    units_total_ = total;
    // Plain mode: the heartbeat's lines carry the count and the time left, and
    // the last unit closes the stage.
    if (bar_ || done == total) Show(Clock::now(), false);
  };
}

std::string StageProgress::Line(Clock::time_point now) const {
  std::string line = stage_;
  if (units_total_ > 0) {
    absl::StrAppend(&line, ": ", units_done_, "/", units_total_, " done");
    const double in_stage =
        std::chrono::duration<double>(now - stage_start_).count();
    if (units_done_ > 0 && units_done_ < units_total_) {
      const double left = in_stage / units_done_ * (units_total_ - units_done_);
      absl::StrAppend(&line, absl::StrFormat(", ~%.0f s left", left));
    }
  }
  return line;
}

void StageProgress::Show(Clock::time_point now, bool stage_begins) {
  const double s = std::chrono::duration<double>(now - start_).count();
  if (bar_) {
    const int width = 20;
    int done = total_ > 0 ? static_cast<int>(width * (step_ - 1) / total_) : 0;
    if (units_total_ > 0 && total_ > 0) {
      done += static_cast<int>(width * units_done_ / (units_total_ * total_));
    }
    std::fprintf(stderr, "\r\033[K[%s%s] %s %lld/%lld %s (%.0f s so far)",
                 std::string(done, '#').c_str(),
                 std::string(width - done, '.').c_str(), command_.c_str(),
                 static_cast<long long>(step_), static_cast<long long>(total_),
                 Line(now).c_str(), s);
    drawn_ = true;
  } else if (stage_begins) {
    // The time the stage starts at, not its duration (the report gives those).
    std::fprintf(stderr, "%s [%lld/%lld] %s (started at %.1f s)\n",
                 command_.c_str(), static_cast<long long>(step_),
                 static_cast<long long>(total_), stage_.c_str(), s);
  } else {
    std::fprintf(stderr, "%s [%lld/%lld] %s (%.1f s so far)\n",
                 command_.c_str(), static_cast<long long>(step_),
                 static_cast<long long>(total_), Line(now).c_str(), s);
  }
  std::fflush(stderr);
  last_shown_ = now;
}

void StageProgress::Heartbeat() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!finished_) {
    // Before the first stage there is nothing to repeat.
    const Clock::time_point due =
        step_ > 0 ? last_shown_ + every_ : Clock::now() + every_;
    if (wake_.wait_until(lock, due, [this] { return finished_; })) return;
    const Clock::time_point now = Clock::now();
    if (step_ > 0 && now >= last_shown_ + every_) Show(now, false);
  }
}

}  // namespace lrkv::cli
