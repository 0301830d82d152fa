// Helpers of the service tests that probe its defects (job_lifecycle_test,
// submission_test, registration_test): listing jobs by raw enum values, waiting for a
// job's state, counting a job's result rows in a database.
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

// ListJobs with `state` and `kind` as raw integers (values outside the enums included).
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
v1::Job WaitUntil(v1::Lrkv::Stub& stub, const std::string& id, double seconds, Done done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  v1::Job job = GetJob(stub, id);
  while (!done(job) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    job = GetJob(stub, id);
  }
  return job;
}

inline int64_t RowsOf(const std::filesystem::path& db, const std::string& table, const std::string& job) {
  auto store = Store::Open(db.string());
  EXPECT_TRUE(store.ok());
  auto n = (*store)->CountRows(table, job);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : -1;
}

}  // namespace lrkv::service

#endif  // LRKV_TESTS_SERVICE_SERVICE_PROBE_UTIL_H_
