// Client commands talking to lrkvd (--server, or the LRKV_SERVER environment
// variable): `lrkv register`, `lrkv jobs list|get|watch|cancel|delete`, `lrkv report`.
// Exit codes: 0 ok, 1 a check in the report failed, 2 usage, 3 server or transport error.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "clients/cli/commands.h"
#include "lrkv/v1/lrkv.grpc.pb.h"

namespace lrkv::cli {
namespace {

constexpr int kExitServer = 3;

struct ClientArgs {
  std::string server;
  std::string token_file;
  std::string job_id, path, state, kind, checkpoint_id, params = "{}";
  bool detach = false;
  int page_size = 50;
  bool json = false;
  std::string junit;
};

std::string ServerAddress(const ClientArgs& a) {
  if (!a.server.empty()) return a.server;
  const char* env = std::getenv("LRKV_SERVER");
  return env != nullptr ? env : "127.0.0.1:50051";
}

std::unique_ptr<v1::Lrkv::Stub> Connect(const ClientArgs& a) {
  return v1::Lrkv::NewStub(
      grpc::CreateChannel(ServerAddress(a), grpc::InsecureChannelCredentials()));
}

void Authorize(const ClientArgs& a, grpc::ClientContext* ctx) {
  std::string path = a.token_file;
  if (path.empty()) {
    const char* env = std::getenv("LRKV_TOKEN_FILE");
    if (env != nullptr) path = env;
  }
  if (path.empty()) return;
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

int RpcError(const grpc::Status& st) {
  std::cerr << "lrkv: error: " << st.error_message() << " (gRPC code " << st.error_code()
            << ")\n";
  return kExitServer;
}

const char* StateName(v1::JobState s) {
  switch (s) {
    case v1::QUEUED: return "queued";
    case v1::RUNNING: return "running";
    case v1::SUCCEEDED: return "succeeded";
    case v1::FAILED: return "failed";
    case v1::CANCELLED: return "cancelled";
    default: return "?";
  }
}

void PrintJob(const v1::Job& j) {
  std::printf("%-36s %-9s %-10s attempts %lld%s%s\n", j.id().c_str(),
              v1::JobKind_Name(j.kind()).c_str(), StateName(j.state()),
              static_cast<long long>(j.attempts()), j.error().empty() ? "" : "  error: ",
              j.error().c_str());
}

int Register(const ClientArgs& a) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::RegisterCheckpointRequest req;
  req.set_path(a.path);
  v1::Checkpoint ck;
  const auto st = stub->RegisterCheckpoint(&ctx, req, &ck);
  if (!st.ok()) return RpcError(st);
  std::printf("%s %s %s, %lld layers, %lld heads (%lld KV), head dim %lld\n", ck.id().c_str(),
              ck.format().c_str(), ck.architecture().c_str(),
              static_cast<long long>(ck.layers()), static_cast<long long>(ck.heads()),
              static_cast<long long>(ck.kv_heads()), static_cast<long long>(ck.head_dim()));
  return kExitOk;
}

int List(const ClientArgs& a) {
  auto stub = Connect(a);
  std::string token;
  do {
    grpc::ClientContext ctx;
    Authorize(a, &ctx);
    v1::ListJobsRequest req;
    req.set_page_size(a.page_size);
    req.set_page_token(token);
    v1::JobState state;
    if (!a.state.empty()) {
      std::string upper = a.state;
      for (char& c : upper) c = static_cast<char>(std::toupper(c));
      if (!v1::JobState_Parse(upper, &state)) {
        std::cerr << "lrkv: error: --state '" << a.state
                  << "' must be queued, running, succeeded, failed or cancelled\n";
        return kExitUsage;
      }
      req.set_state(state);
    }
    v1::ListJobsResponse resp;
    const auto st = stub->ListJobs(&ctx, req, &resp);
    if (!st.ok()) return RpcError(st);
    for (const auto& j : resp.jobs()) PrintJob(j);
    token = resp.next_page_token();
  } while (!token.empty());
  return kExitOk;
}

int Get(const ClientArgs& a) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::GetJobRequest req;
  req.set_job_id(a.job_id);
  v1::Job job;
  const auto st = stub->GetJob(&ctx, req, &job);
  if (!st.ok()) return RpcError(st);
  PrintJob(job);
  return kExitOk;
}

int Watch(const ClientArgs& a) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::WatchJobRequest req;
  req.set_job_id(a.job_id);
  auto reader = stub->WatchJob(&ctx, req);
  v1::JobProgress p;
  while (reader->Read(&p)) {
    std::printf("[%lld] %s %lld/%lld %s", static_cast<long long>(p.seq()), p.stage().c_str(),
                static_cast<long long>(p.step()), static_cast<long long>(p.total()),
                p.message().c_str());
    if (p.has_loss()) std::printf(" loss %.4f", p.loss());
    std::printf("\n");
    std::fflush(stdout);
  }
  const auto st = reader->Finish();
  return st.ok() ? kExitOk : RpcError(st);
}

int Cancel(const ClientArgs& a) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::CancelJobRequest req;
  req.set_job_id(a.job_id);
  v1::Job job;
  const auto st = stub->CancelJob(&ctx, req, &job);
  if (!st.ok()) return RpcError(st);
  PrintJob(job);
  return kExitOk;
}

int Delete(const ClientArgs& a) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::DeleteJobRequest req;
  req.set_job_id(a.job_id);
  v1::DeleteJobResponse resp;
  const auto st = stub->DeleteJob(&ctx, req, &resp);
  return st.ok() ? kExitOk : RpcError(st);
}

// Submits a job and, unless --detach, streams its progress until it ends.
int Submit(const ClientArgs& a) {
  auto stub = Connect(a);
  std::string upper = a.kind;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  v1::JobKind kind;
  if (!v1::JobKind_Parse(upper, &kind) || kind == v1::JOB_KIND_UNSPECIFIED) {
    std::cerr << "lrkv: error: job kind '" << a.kind
              << "' must be convert, heal, verify, bench, compare or pipeline\n";
    return kExitUsage;
  }
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::SubmitJobRequest req;
  req.set_kind(kind);
  req.set_checkpoint_id(a.checkpoint_id);
  req.set_params_json(a.params);
  v1::Job job;
  const auto st = stub->SubmitJob(&ctx, req, &job);
  if (!st.ok()) return RpcError(st);
  std::printf("%s\n", job.id().c_str());
  std::fflush(stdout);
  if (a.detach) return kExitOk;
  ClientArgs w = a;
  w.job_id = job.id();
  if (int rc = Watch(w); rc != kExitOk) return rc;
  grpc::ClientContext gctx;
  Authorize(a, &gctx);
  v1::GetJobRequest greq;
  greq.set_job_id(job.id());
  const auto gst = stub->GetJob(&gctx, greq, &job);
  if (!gst.ok()) return RpcError(gst);
  PrintJob(job);
  return job.state() == v1::SUCCEEDED ? kExitOk : kExitFailure;
}

int Report(const ClientArgs& a) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::GetReportRequest req;
  req.set_job_id(a.job_id);
  v1::Report r;
  const auto st = stub->GetReport(&ctx, req, &r);
  if (!st.ok()) return RpcError(st);
  if (a.json) {
    std::cout << r.json();
  } else {
    std::printf("job %s (%s): %s\n", r.job_id().c_str(), v1::JobKind_Name(r.kind()).c_str(),
                StateName(r.state()));
    for (const auto& c : r.verification().checks()) {
      std::printf("  %-28s %s  max rel %.3g  cos %.3g  %s\n", c.name().c_str(),
                  c.passed() ? "pass" : "FAIL", c.max_rel_error(), c.cos_dist(),
                  c.detail().c_str());
    }
  }
  if (!a.junit.empty()) {
    std::ofstream out(a.junit);
    int failures = 0;
    for (const auto& c : r.verification().checks()) failures += !c.passed();
    out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"lrkv "
        << r.job_id() << "\" tests=\"" << r.verification().checks_size() << "\" failures=\""
        << failures << "\">\n";
    for (const auto& c : r.verification().checks()) {
      out << "    <testcase classname=\"lrkv\" name=\"" << c.name() << "\">";
      if (!c.passed()) out << "<failure message=\"max rel " << c.max_rel_error() << "\"/>";
      out << "</testcase>\n";
    }
    out << "  </testsuite>\n</testsuites>\n";
  }
  const bool failed = r.has_verification() && !r.verification().passed();
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ClientArgs>();
  auto add_common = [a](CLI::App* cmd) {
    cmd->add_option("--server", a->server, "lrkvd address (default $LRKV_SERVER or 127.0.0.1:50051)");
    cmd->add_option("--token-file", a->token_file, "Bearer token file (or $LRKV_TOKEN_FILE)");
  };
  auto* reg = app.add_subcommand("register", "Register a checkpoint on the server (server-side path)");
  add_common(reg);
  reg->add_option("path", a->path, "Path on the server")->required();
  reg->callback([a, exit_code] { *exit_code = Register(*a); });

  auto* jobs = app.add_subcommand("jobs", "List, inspect, watch, cancel or delete server jobs");
  jobs->require_subcommand(1);
  auto* list = jobs->add_subcommand("list", "Jobs, oldest first");
  add_common(list);
  list->add_option("--state", a->state, "queued | running | succeeded | failed | cancelled");
  list->add_option("--page-size", a->page_size, "Jobs per request");
  list->callback([a, exit_code] { *exit_code = List(*a); });
  struct Verb {
    const char* name;
    const char* help;
    int (*fn)(const ClientArgs&);
  };
  for (const Verb& v : {Verb{"get", "One job", Get}, Verb{"watch", "Stream a job's progress", Watch},
                        Verb{"cancel", "Cancel a job", Cancel},
                        Verb{"delete", "Delete a finished job", Delete}}) {
    auto* cmd = jobs->add_subcommand(v.name, v.help);
    add_common(cmd);
    cmd->add_option("job", a->job_id, "Job id")->required();
    auto fn = v.fn;
    cmd->callback([a, exit_code, fn] { *exit_code = fn(*a); });
  }
  auto* submit = app.add_subcommand("submit", "Submit a job to lrkvd and wait for it");
  add_common(submit);
  submit->add_option("kind", a->kind, "convert | heal | verify | ...")->required();
  submit->add_option("--checkpoint-id", a->checkpoint_id, "From `lrkv register`")->required();
  submit->add_option("--params", a->params, "JSON parameters (the lrkv option names)");
  submit->add_flag("--detach", a->detach, "Print the job id and return");
  submit->callback([a, exit_code] { *exit_code = Submit(*a); });

  auto* report = app.add_subcommand("report", "A finished job's report");
  add_common(report);
  report->add_option("job", a->job_id, "Job id")->required();
  report->add_flag("--json", a->json, "Print the JSON report");
  report->add_option("--junit", a->junit, "Write the checks as JUnit XML");
  report->callback([a, exit_code] { *exit_code = Report(*a); });
}

}  // namespace lrkv::cli
