// A job's end that survives a full disk (see Store::FinishJob in store.h).
//
// A job that fails for lack of space leaves the disk full, and its terminal state is
// one more write: without care the row stays `running` — Watch never ends, Delete is
// refused, and the next start counts a crash attempt. So the store keeps a reserve file
// (the "emergency ballast" of databases such as CockroachDB) whose blocks it gives back
// when such a write fails, retries at once, and otherwise keeps the end in memory,
// shown to every reader and written as soon as space returns.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "service/store.h"

namespace lrkv::service {

namespace {

bool Terminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

// Whether `st`, from writing a job's end, is a refusal about the job (not found, not in
// a state that may end) rather than a failure to write: such an end is not kept.
bool Refused(const absl::Status& st) {
  return absl::IsFailedPrecondition(st) || absl::IsNotFound(st);
}

}  // namespace

void Store::ApplyPendingEnd(JobRecord* job) const {
  auto it = pending_ends_.find(job->id);
  if (it == pending_ends_.end()) return;
  job->state = it->second.state;
  job->finished_at = it->second.finished_at;
  job->error = it->second.error;
}

void Store::EnsureReserve() {
  if (reserve_path_.empty()) return;
  std::error_code ec;
  if (std::filesystem::file_size(reserve_path_, ec) >= static_cast<uintmax_t>(reserve_bytes_) &&
      !ec) {
    return;
  }
  const int fd = open(reserve_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  // Real blocks, not a sparse file: only allocated space can be given back.
  const bool allocated = posix_fallocate(fd, 0, reserve_bytes_) == 0;
  close(fd);
  if (!allocated) std::filesystem::remove(reserve_path_, ec);  // no room yet: next flush
}

bool Store::ReleaseReserve() {
  std::error_code ec;
  return !reserve_path_.empty() && std::filesystem::remove(reserve_path_, ec);
}

absl::Status Store::WriteEnd(const std::string& id, const PendingEnd& end) {
  absl::Status st = TransitionJob(id, end.state, end.finished_at, end.error);
  if (!st.ok() && !Refused(st) && ReleaseReserve()) {
    st = TransitionJob(id, end.state, end.finished_at, end.error);
  }
  return st;
}

absl::Status Store::FinishJob(const std::string& id, JobState to, int64_t now,
                              const std::string& error) {
  if (!Terminal(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FinishJob: ", JobStateName(to), " is not an end state"));
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const PendingEnd end{to, now, error};
  absl::Status st = WriteEnd(id, end);
  if (!st.ok() && !Refused(st)) pending_ends_[id] = end;
  return st;
}

absl::Status Store::FlushPendingEnds() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  absl::Status first = absl::OkStatus();
  // Each end is taken out while it is written, so that the row (still running) is what
  // the transition moves, and put back when the write fails.
  std::map<std::string, PendingEnd> waiting;
  waiting.swap(pending_ends_);
  for (const auto& [id, end] : waiting) {
    absl::Status st = WriteEnd(id, end);
    if (st.ok() || Refused(st)) continue;
    pending_ends_.emplace(id, end);
    if (first.ok()) first = st;
  }
  if (pending_ends_.empty()) EnsureReserve();
  return first;
}

size_t Store::PendingEnds() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return pending_ends_.size();
}

}  // namespace lrkv::service
