// The pieces of the lrkvd client the `lrkv` commands share: a stub with
// credentials (TLS when a CA file is given), bearer-token metadata, one-line
// RPC errors, checkpoint registration or resumable chunked upload, following a
// job's progress, and printing or writing its report (summary, JSON, JUnit,
// HTML).
#ifndef LRKV_CLIENTS_CLI_GRPC_CLIENT_H_
#define LRKV_CLIENTS_CLI_GRPC_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "clients/cli/remote.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {

std::string ServerAddress(const ConnectionArgs& a);
// A stub for the server `a` names. A token or CA file that was given but cannot be
// used ends the command (exit 2, naming the file).
std::unique_ptr<v1::Lrkv::Stub> Connect(const ConnectionArgs& a);
void Authorize(const ConnectionArgs& a, grpc::ClientContext* ctx);
// The exit code for a failed RPC: 2 for what the request got wrong (INVALID_ARGUMENT,
// NOT_FOUND, PERMISSION_DENIED, RESOURCE_EXHAUSTED, ...), 3 for the server or the
// connection (UNAVAILABLE, UNAUTHENTICATED, ...), 4 otherwise.
int ExitCodeFor(const grpc::Status& st);
// Prints one line saying what failed ("cannot reach lrkvd at ADDR ..." rather than
// gRPC's own text for a server that is not running); returns ExitCodeFor(st).
int RpcError(const grpc::Status& st);

// The id of `path` on the server: registered when the server can read it (a
// path in its allowed folders), uploaded otherwise (a .gguf file, or a
// safetensors folder with one model.safetensors), resuming an interrupted
// upload of the same file.
grpc::Status EnsureCheckpoint(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                              const std::string& path, v1::Checkpoint* out);
grpc::Status UploadCheckpointFile(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                                  const std::string& path, v1::Checkpoint* out);

// Streams the job's progress to stderr until it ends (a bar on a TTY unless
// LRKV_NO_PROGRESS=1), then returns its final state in *job.
// Only events after `after_seq` are shown (0: all of them).
grpc::Status FollowJob(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                       const std::string& job_id, v1::Job* job, int64_t after_seq = 0);

// Streams job `job_id`'s artifact into `out_dir` (which must not exist, or be empty),
// checking each file's sha256, through WriteDirectoryAtomically's partial folder;
// `files` lists what was written (path, bytes, sha256). INVALID_ARGUMENT for a local
// folder problem, DATA_LOSS for a stream that does not check out.
grpc::Status DownloadArtifact(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                              const std::string& job_id, const std::string& out_dir,
                              nlohmann::json* files);

struct ReportOutputs {
  bool json = false;      // print the JSON report (alone on stdout) instead of the summary
  std::string json_file;  // write the JSON report here
  std::string junit;      // write the checks as JUnit XML
  std::string html;       // write the comparison page (compare jobs)
  std::string artifact;   // download the job's checkpoint into this folder (--out)
};
// Prints/writes the report; returns kExitFailure when a verification check
// failed.
int EmitReport(const v1::Report& report, const ReportOutputs& out);
// GetReport, then EmitReport.
int FetchAndEmitReport(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                       const std::string& job_id, const ReportOutputs& out);

// Submits a job and prints its id; unless `detach`, follows it and emits its
// report. A job that does not succeed prints its state and error and exits
// kExitServer.
int SubmitAndReport(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                    v1::JobKind kind, const std::string& checkpoint_id,
                    const std::string& params_json, bool detach,
                    const ReportOutputs& out);

// "convert" -> CONVERT, ...; false for unknown names and UNSPECIFIED.
bool ParseJobKind(const std::string& name, v1::JobKind* kind);

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_GRPC_CLIENT_H_
