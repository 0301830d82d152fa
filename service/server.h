// The lrkv.v1.Lrkv gRPC service over the store and the job runner. Bad
// parameters are INVALID_ARGUMENT naming the field and range, unknown ids
// NOT_FOUND (codes made in grpc_status.h).
#ifndef LRKV_SERVICE_SERVER_H_
#define LRKV_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "service/job_runner.h"
#include "service/store.h"
#include "service/upload_receiver.h"

namespace lrkv::service {

struct ServerOptions {
  /// Address to listen on; port 0 picks a free one (see LrkvServer::port()).
  std::string listen = "127.0.0.1:50051";
  /// Database, reports and artifacts live here.
  std::string data_dir;
  int workers = 1;
  /// RegisterCheckpoint accepts paths inside these folders only.
  std::vector<std::string> allowed_dirs;
  /// When set, every RPC of the Lrkv service needs "authorization: Bearer
  /// <token>" (health checking stays open).
  std::string auth_token;
  /// Largest checkpoint UploadCheckpoint accepts (RESOURCE_EXHAUSTED beyond).
  int64_t max_upload_bytes = int64_t{16} << 30;
  /// Jobs waiting to run at most; a submission beyond is RESOURCE_EXHAUSTED (and
  /// leaves no job behind).
  int64_t max_queued_jobs = 1024;
  /// Disk kept in data_dir/lrkv.db.reserve and given up when a job's end cannot be
  /// stored for lack of space (0: none), so that a full disk never leaves a job running.
  int64_t reserve_bytes = int64_t{1} << 20;
  /// PEM files; both set: the server speaks TLS only.
  std::string tls_cert_file, tls_key_file;
};

class LrkvServer {
 public:
  // Opens the store (recovering jobs a crash left running), starts the workers
  // and the gRPC server with health checking.
  static absl::StatusOr<std::unique_ptr<LrkvServer>> Start(
      const ServerOptions& options);
  ~LrkvServer();
  void Shutdown();
  void Wait();
  int port() const { return port_; }

 private:
  LrkvServer() = default;
  class Service;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobRunner> runner_;
  std::unique_ptr<UploadReceiver> uploads_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int lock_fd_ = -1;  // data_dir/lrkvd.lock, flock-ed for the server's life
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_SERVER_H_
