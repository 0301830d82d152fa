// Client commands talking to lrkvd (--server, or the LRKV_SERVER environment
// variable): `lrkv register|upload`, `lrkv submit`, `lrkv pipeline`,
// `lrkv jobs list|get|watch|cancel|delete`, `lrkv report`.
// Exit codes: 0 ok, 1 a check in the report failed, 2 usage, 3 server or
// transport error.
#include <grpcpp/grpcpp.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "clients/cli/commands.h"
#include "clients/cli/grpc_client.h"
#include "lrkv/v1/lrkv.grpc.pb.h"

namespace lrkv::cli {
namespace {

struct ClientArgs {
  ConnectionArgs conn;
  std::string job_id, path, state, kind, checkpoint_id, params = "{}";
  bool detach = false;
  int page_size = 50;
  bool json = false;
  std::string junit, html;
};

std::unique_ptr<v1::Lrkv::Stub> Connect(const ClientArgs& a) {
  return lrkv::cli::Connect(a.conn);
}
void Authorize(const ClientArgs& a, grpc::ClientContext* ctx) {
  lrkv::cli::Authorize(a.conn, ctx);
}

const char* StateName(v1::JobState s) {
  switch (s) {
    case v1::QUEUED:
      return "queued";
    case v1::RUNNING:
      return "running";
    case v1::SUCCEEDED:
      return "succeeded";
    case v1::FAILED:
      return "failed";
    case v1::CANCELLED:
      return "cancelled";
    default:
      return "?";
  }
}

void PrintJob(const v1::Job& j) {
  std::printf("%-36s %-9s %-10s attempts %lld%s%s\n", j.id().c_str(),
              v1::JobKind_Name(j.kind()).c_str(), StateName(j.state()),
              static_cast<long long>(j.attempts()),
              j.error().empty() ? "" : "  error: ", j.error().c_str());
}

void PrintCheckpoint(const v1::Checkpoint& ck) {
  std::printf("%s %s %s, %lld layers, %lld heads (%lld KV), head dim %lld\n",
              ck.id().c_str(), ck.format().c_str(), ck.architecture().c_str(),
              static_cast<long long>(ck.layers()),
              static_cast<long long>(ck.heads()),
              static_cast<long long>(ck.kv_heads()),
              static_cast<long long>(ck.head_dim()));
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
  PrintCheckpoint(ck);
  return kExitOk;
}

int Upload(const ClientArgs& a) {
  auto stub = Connect(a);
  v1::Checkpoint ck;
  const auto st = UploadCheckpointFile(a.conn, *stub, a.path, &ck);
  if (!st.ok()) return RpcError(st);
  PrintCheckpoint(ck);
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
        std::cerr
            << "lrkv: error: --state '" << a.state
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

// A job-id RPC that answers with the job (GetJob, CancelJob): prints it.
template <typename Request>
int CallForJob(const ClientArgs& a,
               grpc::Status (v1::Lrkv::Stub::*rpc)(grpc::ClientContext*,
                                                   const Request&, v1::Job*)) {
  auto stub = Connect(a);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  Request req;
  req.set_job_id(a.job_id);
  v1::Job job;
  const auto st = ((*stub).*rpc)(&ctx, req, &job);
  if (!st.ok()) return RpcError(st);
  PrintJob(job);
  return kExitOk;
}

int Get(const ClientArgs& a) { return CallForJob(a, &v1::Lrkv::Stub::GetJob); }

int Watch(const ClientArgs& a) {
  auto stub = Connect(a);
  v1::Job job;
  const auto st = FollowJob(a.conn, *stub, a.job_id, &job);
  if (!st.ok()) return RpcError(st);
  PrintJob(job);
  return kExitOk;
}

int Cancel(const ClientArgs& a) {
  return CallForJob(a, &v1::Lrkv::Stub::CancelJob);
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

ReportOutputs Outputs(const ClientArgs& a) {
  ReportOutputs out;
  out.json = a.json;
  out.junit = a.junit;
  out.html = a.html;
  return out;
}

int Report(const ClientArgs& a) {
  auto stub = Connect(a);
  return FetchAndEmitReport(a.conn, *stub, a.job_id, Outputs(a));
}

// Submits a job and, unless --detach, follows it and prints its report.
int Submit(const ClientArgs& a) {
  auto stub = Connect(a);
  v1::JobKind kind;
  if (!ParseJobKind(a.kind, &kind)) {
    std::cerr
        << "lrkv: error: job kind '" << a.kind
        << "' must be convert, heal, verify, bench, compare or pipeline\n";
    return kExitUsage;
  }
  std::string checkpoint_id = a.checkpoint_id;
  if (!a.path.empty()) {
    v1::Checkpoint ck;
    const auto st = EnsureCheckpoint(a.conn, *stub, a.path, &ck);
    if (!st.ok()) return RpcError(st);
    checkpoint_id = ck.id();
  }
  if (checkpoint_id.empty()) {
    std::cerr << "lrkv: error: give --checkpoint-id or --checkpoint\n";
    return kExitUsage;
  }
  return SubmitAndReport(a.conn, *stub, kind, checkpoint_id, a.params, a.detach,
                         Outputs(a));
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ClientArgs>();
  auto add_common = [a](CLI::App* cmd) { AddConnectionOptions(cmd, &a->conn); };
  auto* reg = app.add_subcommand(
      "register", "Register a checkpoint on the server (server-side path)");
  add_common(reg);
  reg->add_option("path", a->path, "Path on the server")->required();
  reg->callback([a, exit_code] { *exit_code = Register(*a); });
  auto* up = app.add_subcommand("upload",
                                "Upload a checkpoint to the server in 1 MiB "
                                "chunks (resumes an interrupted upload)");
  add_common(up);
  up->add_option(
        "path", a->path,
        "A .gguf file, or a folder with model.safetensors and config.json")
      ->required();
  up->callback([a, exit_code] { *exit_code = Upload(*a); });

  auto* jobs = app.add_subcommand(
      "jobs", "List, inspect, watch, cancel or delete server jobs");
  jobs->require_subcommand(1);
  auto* list = jobs->add_subcommand("list", "Jobs, oldest first");
  add_common(list);
  list->add_option("--state", a->state,
                   "queued | running | succeeded | failed | cancelled");
  list->add_option("--page-size", a->page_size, "Jobs per request");
  list->callback([a, exit_code] { *exit_code = List(*a); });
  struct Verb {
    const char* name;
    const char* help;
    int (*fn)(const ClientArgs&);
  };
  for (const Verb& v : {Verb{"get", "One job", Get},
                        Verb{"watch", "Stream a job's progress", Watch},
                        Verb{"cancel", "Cancel a job", Cancel},
                        Verb{"delete", "Delete a finished job", Delete}}) {
    auto* cmd = jobs->add_subcommand(v.name, v.help);
    add_common(cmd);
    cmd->add_option("job", a->job_id, "Job id")->required();
    auto fn = v.fn;
    cmd->callback([a, exit_code, fn] { *exit_code = fn(*a); });
  }
  auto* submit =
      app.add_subcommand("submit", "Submit a job to lrkvd and wait for it");
  add_common(submit);
  submit->add_option("kind", a->kind, "convert | heal | verify | ...")
      ->required();
  submit->add_option("--checkpoint-id", a->checkpoint_id,
                     "From `lrkv register` or `lrkv upload`");
  submit->add_option("--checkpoint", a->path,
                     "A local checkpoint (registered or uploaded first)");
  submit->add_option("--params", a->params,
                     "JSON parameters (the lrkv option names)");
  submit->add_flag("--detach", a->detach, "Print the job id and return");
  submit->callback([a, exit_code] { *exit_code = Submit(*a); });

  // The pipeline runs on lrkvd only: convert -> heal -> verify -> bench.
  auto pipe = std::make_shared<ClientArgs>();
  auto stages = std::make_shared<std::array<std::string, 4>>();
  auto* pipeline = app.add_subcommand("pipeline",
                                      "Run convert -> heal -> verify -> bench "
                                      "as one lrkvd job and print its report");
  AddConnectionOptions(pipeline, &pipe->conn);
  pipeline
      ->add_option("--checkpoint", pipe->path,
                   "Source checkpoint (registered or uploaded)")
      ->required();
  pipeline
      ->add_option("--convert", (*stages)[0],
                   "Convert parameters, a JSON object")
      ->required();
  pipeline->add_option("--heal", (*stages)[1],
                       "Heal parameters, a JSON object (optional)");
  pipeline->add_option("--verify", (*stages)[2],
                       "Verify parameters, a JSON object");
  pipeline->add_option("--bench", (*stages)[3],
                       "{\"context\": L, \"tokens\": N}");
  pipeline->add_flag("--detach", pipe->detach, "Print the job id and return");
  pipeline->add_flag("--json", pipe->json, "Print the JSON report");
  pipeline->add_option("--junit", pipe->junit, "Write the checks as JUnit XML");
  pipeline->callback([pipe, stages, exit_code] {
    std::string params = "{";
    const char* names[] = {"convert", "heal", "verify", "bench"};
    for (int i = 0; i < 4; ++i) {
      if ((*stages)[i].empty()) continue;
      if (params.size() > 1) params += ", ";
      params += "\"" + std::string(names[i]) + "\": " + (*stages)[i];
    }
    pipe->params = params + "}";
    pipe->kind = "pipeline";
    *exit_code = Submit(*pipe);
  });

  auto* report = app.add_subcommand("report", "A finished job's report");
  add_common(report);
  report->add_option("job", a->job_id, "Job id")->required();
  report->add_flag("--json", a->json, "Print the JSON report");
  report->add_option("--junit", a->junit, "Write the checks as JUnit XML");
  report->add_option("--html", a->html,
                     "Write a compare job's page (tables and SVG plots)");
  report->callback([a, exit_code] { *exit_code = Report(*a); });
}

}  // namespace lrkv::cli
