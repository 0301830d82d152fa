// RegisterCheckpoint's way in: a server-side path inside an allowed folder becomes a
// content-addressed entry of the data folder that jobs read from then on, opened once.
//
// Checking a path and opening it later by name lets a client swap what the name points
// to in between (a folder replaced by a symlink to an outside folder: the probe's job
// then read the outside file). So each file is opened exactly once, beneath its allowed
// root with no symlink or ".." on the way (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), and what was opened is copied (reflinked where the file system
// shares extents) into a staging folder of the data folder, read-only and owned by
// lrkvd. The caller validates and hashes that staged copy and names it by its content;
// nothing a client does to the original path or file afterwards reaches a job. (A hard
// link shared the client's inode: rewriting the registered file rewrote the store.)
#ifndef LRKV_SERVICE_CHECKPOINT_IMPORT_H_
#define LRKV_SERVICE_CHECKPOINT_IMPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv::service {

struct ImportedCheckpoint {
  // The staged copy: a .gguf file, or a folder holding the checkpoint folder's files.
  std::string staged;
  // The staging folder to remove once the copy has been moved (or on failure).
  std::string staging_dir;
};

// Stages `path` (a file, or a folder whose regular files are taken) under
// `staging_root`. PermissionDenied when it is not beneath one of `allowed_roots` (the
// same answer whether it exists or not, or when a symlink lies on the way), NotFound
// when it does not exist, InvalidArgument for what is neither a file nor a folder.
absl::StatusOr<ImportedCheckpoint> ImportCheckpoint(const std::string& path,
                                                    const std::vector<std::string>& allowed_roots,
                                                    const std::string& staging_root);

// OK when `path` opens beneath one of `allowed_roots` the way ImportCheckpoint opens it
// (the same PermissionDenied / NotFound answers); nothing is staged.
absl::Status CheckBeneathAllowedRoots(const std::string& path,
                                      const std::vector<std::string>& allowed_roots);

// A job's text input (calibration, evaluation, training text) the same way: opened once
// beneath an allowed folder, staged by content as `inputs_dir`/<sha256>.txt, whose path
// the job then reads. The same errors as ImportCheckpoint; InvalidArgument for what is
// not a regular file.
absl::StatusOr<std::string> ImportTextInput(const std::string& path,
                                            const std::vector<std::string>& allowed_roots,
                                            const std::string& inputs_dir);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_CHECKPOINT_IMPORT_H_
