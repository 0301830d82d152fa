// Regression tests for the service probe's defects (one test per defect family): each
// failed before its fix. Loopback only, bounded in time.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service_fixture.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using HardeningTest = ServiceTest;

grpc::Status ListJobs(v1::Lrkv::Stub& stub, int state, int kind,
                      v1::ListJobsResponse* out) {
  grpc::ClientContext ctx;
  v1::ListJobsRequest req;
  req.set_state(static_cast<v1::JobState>(state));
  req.set_kind(static_cast<v1::JobKind>(kind));
  return stub.ListJobs(&ctx, req, out);
}

// Enums arrive as integers: outside the enum is INVALID_ARGUMENT, never a crash
// (state 127 used to index the state-name table out of bounds and kill lrkvd).
TEST_F(HardeningTest, EnumsOutsideTheirRangeAreInvalidArguments) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  v1::Job job;
  ASSERT_TRUE(Submit(v1::BENCH, ck.id(), R"({"context": [16], "batch": 1, "iterations": 1})",
                     &job)
                  .ok());
  for (int state : {6, 7, 8, 127, -1, 1 << 30}) {
    v1::ListJobsResponse resp;
    const grpc::Status st = ListJobs(*stub_, state, 0, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << state;
    EXPECT_THAT(st.error_message(), HasSubstr("is not a JobState")) << state;
  }
  for (int kind : {7, 99, -3}) {
    v1::ListJobsResponse resp;
    const grpc::Status st = ListJobs(*stub_, 0, kind, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << kind;
    EXPECT_THAT(st.error_message(), HasSubstr("is not a JobKind")) << kind;
  }
  for (int kind : {7, 99}) {
    const grpc::Status st = Submit(static_cast<v1::JobKind>(kind), ck.id(), "{}", &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << kind;
  }
  // The server is still up and answers a valid filter.
  v1::ListJobsResponse resp;
  ASSERT_TRUE(ListJobs(*stub_, 0, v1::BENCH, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 1);
}

// One server per data folder (a second re-queued the first's running job and ran it
// twice), and none on a port another holds (SO_REUSEPORT split the requests).
TEST_F(HardeningTest, ASecondServerOnTheSameFolderOrPortIsRefused) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = (dir_ / "data").string();
  auto second = LrkvServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another lrkvd"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("pid "));

  o.data_dir = (dir_ / "other").string();
  o.listen = absl::StrCat("127.0.0.1:", server_->port());
  auto same_port = LrkvServer::Start(o);
  ASSERT_FALSE(same_port.ok());
  EXPECT_EQ(same_port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(same_port.status().message()), HasSubstr("cannot listen"));
  // The refused server released its folder: a third one on a free port starts there.
  o.listen = "127.0.0.1:0";
  auto third = LrkvServer::Start(o);
  ASSERT_TRUE(third.ok()) << third.status();
  (*third)->Shutdown();

  // Once the first stops, its folder is free again.
  server_->Shutdown();
  server_.reset();
  o.data_dir = (dir_ / "data").string();
  auto again = LrkvServer::Start(o);
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace lrkv::service
