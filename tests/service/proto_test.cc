// The generated gRPC API: messages round-trip and the service carries every RPC the
// design lists (a change to the .proto that drops one fails here).
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "lrkv/v1/lrkv.pb.h"

namespace {

TEST(Proto, JobRoundTrips) {
  lrkv::v1::Job job;
  job.set_id("j1");
  job.set_kind(lrkv::v1::PIPELINE);
  job.set_state(lrkv::v1::RUNNING);
  job.set_params_json(R"({"budget": 0.5})");
  job.mutable_progress()->set_loss(0.25);
  std::string bytes;
  ASSERT_TRUE(job.SerializeToString(&bytes));
  lrkv::v1::Job back;
  ASSERT_TRUE(back.ParseFromString(bytes));
  EXPECT_EQ(back.id(), "j1");
  EXPECT_EQ(back.kind(), lrkv::v1::PIPELINE);
  EXPECT_TRUE(back.progress().has_loss());
  EXPECT_DOUBLE_EQ(back.progress().loss(), 0.25);
}

TEST(Proto, ServiceHasEveryRpc) {
  const auto* service = lrkv::v1::Job::descriptor()->file()->FindServiceByName("Lrkv");
  ASSERT_NE(service, nullptr);
  std::set<std::string> names;
  for (int i = 0; i < service->method_count(); ++i) names.insert(service->method(i)->name());
  for (const char* rpc : {"UploadCheckpoint", "GetUploadStatus", "RegisterCheckpoint",
                          "SubmitJob", "GetJob", "ListJobs", "WatchJob", "CancelJob",
                          "DeleteJob", "GetReport"}) {
    EXPECT_EQ(names.count(rpc), 1u) << rpc;
  }
  EXPECT_TRUE(service->FindMethodByName("UploadCheckpoint")->client_streaming());
  EXPECT_TRUE(service->FindMethodByName("WatchJob")->server_streaming());
}

}  // namespace
