// What a job reads from the store is what was registered: every checkpoint and
// text input a job names is checked against its content address (its sha256)
// before the job opens it. Entries are lrkvd's own copies (checkpoint_import.h
// never links a client's file), so a mismatch means a store written behind
// lrkvd's back (a disk fault, an older store whose entries were hard links to
// the clients' files): the entry is moved to data_dir/quarantine and the job
// fails naming it by id. A re-hash is skipped while an entry's inode, size and
// times are those it had when it last hashed right (any write changes its
// ctime), so a store that is not touched costs one hash per entry per lrkvd
// run.
#ifndef LRKV_SERVICE_STORE_INTEGRITY_H_
#define LRKV_SERVICE_STORE_INTEGRITY_H_

#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lrkv::service {

// Moves `path` (a file or folder of the store) into data_dir/quarantine under a
// fresh name, which it returns.
absl::StatusOr<std::string> Quarantine(const std::string& data_dir,
                                       const std::string& path);

class StoreIntegrity {
 public:
  explicit StoreIntegrity(std::string data_dir)
      : data_dir_(std::move(data_dir)) {}

  // The checkpoint entry `path` (its store path) against its id.
  // FailedPrecondition, naming the id, when its bytes no longer hash to it (the
  // entry quarantined).
  absl::Status CheckCheckpoint(const std::string& id, const std::string& path);
  // Every store entry a job's parameters name: the checkpoints
  // (data_dir/checkpoints/<sha256>[.gguf]) and text inputs
  // (data_dir/inputs/<sha256>.txt) among its string values.
  absl::Status CheckParams(const std::string& params_json);

 private:
  absl::Status Check(const std::string& path, const std::string& sha256,
                     const std::string& shown);

  const std::string data_dir_;
  std::mutex mu_;
  // Path -> the stamp (inode, size, times) it had when it last hashed right.
  std::map<std::string, std::string> verified_;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_STORE_INTEGRITY_H_
