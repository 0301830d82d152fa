// Helpers of the service tests that probe its defects (job_lifecycle_test,
// submission_test, registration_test, integrity_test, store_rewrite_test):
// listing jobs by raw enum values, waiting for a job's state, counting a job's
// result rows in a database, upload messages, files left in a folder.
#ifndef LRKV_TESTS_SERVICE_SERVICE_PROBE_UTIL_H_
#define LRKV_TESTS_SERVICE_SERVICE_PROBE_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "service/store.h"
#include "tests/service/service_fixture.h"

namespace lrkv::service {

// ListJobs with `state` and `kind` as raw integers (values outside the enums
// included).
inline grpc::Status ListJobs(v1::Lrkv::Stub& stub, int state, int kind,
                             v1::ListJobsResponse* out) {
  grpc::ClientContext ctx;
  v1::ListJobsRequest req;
  req.set_state(static_cast<v1::JobState>(state));
  req.set_kind(static_cast<v1::JobKind>(kind));
  return stub.ListJobs(&ctx, req, out);
}

// Waits (at most `seconds`) until `done(job)`.
template <typename Done>
v1::Job WaitUntil(v1::Lrkv::Stub& stub, const std::string& id, double seconds,
                  Done done) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  v1::Job job = GetJob(stub, id);
  while (!done(job) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    job = GetJob(stub, id);
  }
  return job;
}

inline int64_t RowsOf(const std::filesystem::path& db, const std::string& table,
                      const std::string& job) {
  auto store = Store::Open(db.string());
  EXPECT_TRUE(store.ok());
  auto n = (*store)->CountRows(table, job);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : -1;
}

// A header message for an upload of `size` bytes (a GGUF file, or with a config
// a safetensors one).
inline v1::UploadCheckpointRequest Header(const std::string& id, int64_t size,
                                          const std::string& config_json = "") {
  v1::UploadCheckpointRequest msg;
  msg.mutable_header()->set_upload_id(id);
  msg.mutable_header()->set_file_name(config_json.empty() ? "m.gguf"
                                                          : "m.safetensors");
  msg.mutable_header()->set_total_bytes(size);
  msg.mutable_header()->set_config_json(config_json);
  return msg;
}

inline v1::UploadCheckpointRequest Chunk(int64_t offset,
                                         const std::string& data) {
  v1::UploadCheckpointRequest msg;
  msg.mutable_chunk()->set_offset(offset);
  msg.mutable_chunk()->set_data(data);
  return msg;
}

// Regular files beneath `dir`, at any depth.
inline int64_t FilesUnder(const std::filesystem::path& dir) {
  std::error_code ec;
  int64_t n = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::end(it); it.increment(ec)) {
    n += it->is_regular_file(ec);
  }
  return n;
}

}  // namespace lrkv::service

#endif  // LRKV_TESTS_SERVICE_SERVICE_PROBE_UTIL_H_
