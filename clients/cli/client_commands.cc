// Client commands talking to lrkvd (--server, or the LRKV_SERVER environment
// variable): `lrkv register|upload`, `lrkv submit`, `lrkv pipeline`,
// `lrkv jobs list|get|watch|cancel|delete`, `lrkv report`.
// Exit codes as commands.h says; with --json each prints its result (a checkpoint, a
// job, the list, a report) as JSON on stdout and nothing else there.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "clients/cli/commands.h"
#include "clients/cli/grpc_client.h"
#include "clients/cli/schema_flags.h"
#include "clients/cli/shared_options.h"
#include "clients/cli/yaml_config.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {
namespace {

struct ClientArgs {
  std::string job_id, path, state, kind, checkpoint_id, params = "{}";
  bool detach = false;
  int page_size = 50;
  int64_t since = -1;  // jobs watch: events after this sequence number (-1: from now)
  bool all = false;    // jobs watch: every event from the start
  std::string json_out, junit, html;
  // pipeline: each stage's parameters, JSON objects.
  std::string convert, heal, verify, bench;
};

using ClientSchema = OptionSchema<ClientArgs>;

// The schema of one client command, declared by `declare` on first use and
// kept for the process.
const ClientSchema& SchemaOf(const std::string& command,
                             void (*declare)(ClientSchema&)) {
  static auto* schemas = new std::map<std::string, ClientSchema>();
  auto it = schemas->find(command);
  if (it == schemas->end()) {
    ClientSchema s(command);
    declare(s);
    it = schemas->emplace(command, std::move(s)).first;
  }
  return it->second;
}

void AddJobId(ClientSchema& s) {
  s.Value(
       "job", [](ClientArgs & a) -> auto& { return a.job_id; }, "Job id")
      .Positional()
      .Required();
}

void AddDetach(ClientSchema& s) {
  s.Value(
      "detach", [](ClientArgs & a) -> auto& { return a.detach; },
      "Print the job id and return");
}

// --json-out and --junit of a command that prints a job's report.
void AddReportOutputs(ClientSchema& s) {
  AddJsonOutOption(
      s, [](ClientArgs & a) -> auto& { return a.json_out; });
  s.Value(
       "junit", [](ClientArgs & a) -> auto& { return a.junit; },
       "Write the checks as JUnit XML (one testcase per check)")
      .Path();
}

std::unique_ptr<v1::Lrkv::Stub> Connect(const ClientArgs&) {
  return lrkv::cli::Connect(Globals().conn);
}
void Authorize(const ClientArgs&, grpc::ClientContext* ctx) {
  lrkv::cli::Authorize(Globals().conn, ctx);
}

// A message as JSON (proto3's JSON mapping, field names as in the .proto).
nlohmann::json ToJson(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &text, o);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
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
  if (Globals().json) {
    std::printf("%s\n", ToJson(j).dump().c_str());
    return;
  }
  std::printf("%-36s %-9s %-10s attempts %lld%s%s\n", j.id().c_str(),
              v1::JobKind_Name(j.kind()).c_str(), StateName(j.state()),
              static_cast<long long>(j.attempts()),
              j.error().empty() ? "" : "  error: ", j.error().c_str());
}

void PrintCheckpoint(const v1::Checkpoint& ck) {
  if (Globals().json) {
    std::printf("%s\n", ToJson(ck).dump().c_str());
    return;
  }
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
  std::error_code ec;
  if (!std::filesystem::exists(a.path, ec)) {
    return UsageError(a.path + ": no such file or folder here");
  }
  const auto st = UploadCheckpointFile(Globals().conn, *stub, a.path, &ck);
  if (!st.ok()) return RpcError(st);
  PrintCheckpoint(ck);
  return kExitOk;
}

int List(const ClientArgs& a) {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (!a.state.empty()) {
    std::string upper = a.state;
    for (char& c : upper) c = static_cast<char>(std::toupper(c));
    if (!v1::JobState_Parse(upper, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return UsageError("--state '" + a.state +
                        "' must be queued, running, succeeded, failed or cancelled");
    }
  }
  v1::JobKind kind = v1::JOB_KIND_UNSPECIFIED;
  if (!a.kind.empty() && !ParseJobKind(a.kind, &kind)) {
    return UsageError("--kind '" + a.kind +
                      "' must be convert, heal, verify, bench, compare or pipeline");
  }
  auto stub = Connect(a);
  std::string token;
  nlohmann::json all = nlohmann::json::array();
  int64_t shown = 0;
  do {
    grpc::ClientContext ctx;
    Authorize(a, &ctx);
    v1::ListJobsRequest req;
    req.set_page_size(a.page_size);
    req.set_page_token(token);
    req.set_state(state);
    req.set_kind(kind);
    v1::ListJobsResponse resp;
    const auto st = stub->ListJobs(&ctx, req, &resp);
    if (!st.ok()) return RpcError(st);
    for (const auto& j : resp.jobs()) {
      if (Globals().json) {
        all.push_back(ToJson(j));
        continue;
      }
      if (shown++ == 0) {
        std::printf("%-36s %-9s %-10s %s\n", "JOB", "KIND", "STATE", "ATTEMPTS");
      }
      PrintJob(j);
    }
    token = resp.next_page_token();
  } while (!token.empty());
  if (Globals().json) {
    std::printf("%s\n", nlohmann::json({{"jobs", all}}).dump().c_str());
  } else if (shown == 0) {
    std::fprintf(stderr, "no jobs%s on %s\n",
                 a.state.empty() && a.kind.empty() ? "" : " match", 
                 ServerAddress(Globals().conn).c_str());
  }
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

// Follows a job from now on (its latest event first), as `tail -f` does; --since SEQ
// from after that event, --all from the start.
int Watch(const ClientArgs& a) {
  auto stub = Connect(a);
  v1::Job job;
  int64_t after = a.since;
  if (!a.all && a.since < 0) {
    grpc::ClientContext ctx;
    Authorize(a, &ctx);
    v1::GetJobRequest req;
    req.set_job_id(a.job_id);
    const auto st = stub->GetJob(&ctx, req, &job);
    if (!st.ok()) return RpcError(st);
    after = std::max<int64_t>(0, job.progress().seq() - 1);  // the latest event, then new ones
  }
  if (a.all) after = 0;
  const auto st = FollowJob(Globals().conn, *stub, a.job_id, &job, after);
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
  if (!st.ok()) return RpcError(st);
  if (Globals().json) {
    std::printf("%s\n", nlohmann::json({{"deleted", a.job_id}}).dump().c_str());
  } else {
    std::printf("deleted %s\n", a.job_id.c_str());
  }
  return kExitOk;
}

ReportOutputs Outputs(const ClientArgs& a) {
  ReportOutputs out;
  out.json = Globals().json;
  out.json_file = a.json_out;
  out.junit = a.junit;
  out.html = a.html;
  return out;
}

int Report(const ClientArgs& a) {
  auto stub = Connect(a);
  return FetchAndEmitReport(Globals().conn, *stub, a.job_id, Outputs(a));
}

// Submits a job and, unless --detach, follows it and prints its report.
int Submit(const ClientArgs& a) {
  auto stub = Connect(a);
  v1::JobKind kind;
  if (!ParseJobKind(a.kind, &kind)) {
    return UsageError("job kind '" + a.kind +
                      "' must be convert, heal, verify, bench, compare or pipeline");
  }
  std::string checkpoint_id = a.checkpoint_id;
  if (!a.path.empty()) {
    v1::Checkpoint ck;
    const auto st = EnsureCheckpoint(Globals().conn, *stub, a.path, &ck);
    if (!st.ok()) return RpcError(st);
    checkpoint_id = ck.id();
  }
  if (checkpoint_id.empty()) {
    return UsageError("give --checkpoint-id or --checkpoint");
  }
  return SubmitAndReport(Globals().conn, *stub, kind, checkpoint_id, a.params, a.detach,
                         Outputs(a));
}

// The parameters of a pipeline job: each stage's object, and the option file
// they came from.
int Pipeline(ClientArgs a) {
  std::string params = "{";
  const std::pair<const char*, const std::string*> stages[] = {
      {"convert", &a.convert},
      {"heal", &a.heal},
      {"verify", &a.verify},
      {"bench", &a.bench}};
  for (const auto& [name, value] : stages) {
    if (value->empty()) continue;
    if (params.size() > 1) params += ", ";
    params += "\"" + std::string(name) + "\": " + *value;
  }
  if (nlohmann::json file = ConfigFileRecord(); !file.is_null()) {
    if (params.size() > 1) params += ", ";
    params += "\"config_file\": " + file.dump();
  }
  a.params = params + "}";
  a.kind = "pipeline";
  return Submit(a);
}

void AddJobsCommands(CLI::App& app, int* exit_code) {
  auto* jobs = app.add_subcommand(
      "jobs", "List, inspect, watch, cancel or delete server jobs");
  jobs->require_subcommand(1);
  auto* list = jobs->add_subcommand("list", "Jobs, oldest first");
  AddSchemaCommand(
      list,
      SchemaOf("jobs list",
               [](ClientSchema& s) {
                 s.Value(
                     "state", [](ClientArgs & a) -> auto& { return a.state; },
                     "queued | running | succeeded | failed | cancelled");
                 s.Value(
                     "kind", [](ClientArgs & a) -> auto& { return a.kind; },
                     "convert | heal | verify | bench | compare | pipeline");
                 s.Value(
                      "page_size",
                      [](ClientArgs & a) -> auto& { return a.page_size; },
                      "Jobs per request")
                     .Range(1, 1000);
               }),
      exit_code, List);
  AddSchemaCommand(jobs->add_subcommand("get", "One job"),
                   SchemaOf("jobs get", AddJobId), exit_code, Get);
  AddSchemaCommand(
      jobs->add_subcommand("watch", "Stream a job's progress"),
      SchemaOf("jobs watch",
               [](ClientSchema& s) {
                 AddJobId(s);
                 s.Value(
                      "since", [](ClientArgs & a) -> auto& { return a.since; },
                      "Show the events after this sequence number (default: "
                      "the latest "
                      "event, then new ones)")
                     .Min(0);
                 s.Value(
                     "all", [](ClientArgs & a) -> auto& { return a.all; },
                     "Show every event from the job's start");
                 s.Check([](const ClientArgs& a, OptionSource) -> absl::Status {
                   if (a.all && a.since >= 0) {
                     return absl::InvalidArgumentError(
                         "--all and --since each say where the events start; "
                         "give one");
                   }
                   return absl::OkStatus();
                 });
               }),
      exit_code, Watch);
  AddSchemaCommand(jobs->add_subcommand("cancel", "Cancel a job"),
                   SchemaOf("jobs cancel", AddJobId), exit_code, Cancel);
  AddSchemaCommand(jobs->add_subcommand("delete", "Delete a finished job"),
                   SchemaOf("jobs delete", AddJobId), exit_code, Delete);
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  auto* reg = app.add_subcommand(
      "register", "Register a checkpoint on the server (server-side path)");
  AddSchemaCommand(
      reg,
      SchemaOf("register",
               [](ClientSchema& s) {
                 s.Value(
                      "path", [](ClientArgs & a) -> auto& { return a.path; },
                      "Path on the server")
                     .Positional()
                     .Required();
               }),
      exit_code, Register);
  auto* up = app.add_subcommand("upload",
                                "Upload a checkpoint to the server in 1 MiB "
                                "chunks (resumes an interrupted upload)");
  AddSchemaCommand(
      up,
      SchemaOf("upload",
               [](ClientSchema& s) {
                 s.Value(
                      "path", [](ClientArgs & a) -> auto& { return a.path; },
                      "A .gguf file, or a folder with model.safetensors and "
                      "config.json")
                     .Path()
                     .Positional()
                     .Required();
               }),
      exit_code, Upload);
  AddJobsCommands(app, exit_code);

  auto* submit =
      app.add_subcommand("submit", "Submit a job to lrkvd and wait for it");
  AddSchemaCommand(
      submit,
      SchemaOf("submit",
               [](ClientSchema& s) {
                 s.Value(
                      "kind", [](ClientArgs & a) -> auto& { return a.kind; },
                      "convert | heal | verify | ...")
                     .Positional()
                     .Required();
                 s.Value(
                     "checkpoint_id",
                     [](ClientArgs & a) -> auto& { return a.checkpoint_id; },
                     "From `lrkv register` or `lrkv upload`");
                 s.Value(
                      "checkpoint",
                      [](ClientArgs & a) -> auto& { return a.path; },
                      "A local checkpoint (registered or uploaded first)")
                     .Path();
                 s.Value(
                     "params", [](ClientArgs & a) -> auto& { return a.params; },
                     "JSON parameters (the lrkv option names)");
                 AddDetach(s);
               }),
      exit_code, Submit);

  // The pipeline runs on lrkvd only: convert -> heal -> verify -> bench.
  auto* pipeline = app.add_subcommand("pipeline",
                                      "Run convert -> heal -> verify -> bench "
                                      "as one lrkvd job and print its report");
  AddSchemaCommand(
      pipeline,
      SchemaOf(
          "pipeline",
          [](ClientSchema& s) {
            AddCheckpointOption(
                s, [](ClientArgs & a) -> auto& { return a.path; },
                "Source checkpoint (registered or uploaded)");
            s.Value(
                 "convert", [](ClientArgs & a) -> auto& { return a.convert; },
                 "Convert parameters, a JSON object")
                .Required();
            s.Value(
                "heal", [](ClientArgs & a) -> auto& { return a.heal; },
                "Heal parameters, a JSON object (optional)");
            s.Value(
                "verify", [](ClientArgs & a) -> auto& { return a.verify; },
                "Verify parameters, a JSON object");
            s.Value(
                "bench", [](ClientArgs & a) -> auto& { return a.bench; },
                "`lrkv bench generate`'s timing options, a JSON object "
                "(default "
                "{\"context\": 512, \"tokens\": 16})");
            AddDetach(s);
            AddReportOutputs(s);
          }),
      exit_code, Pipeline);

  auto* report = app.add_subcommand("report", "A finished job's report");
  AddSchemaCommand(
      report,
      SchemaOf("report",
               [](ClientSchema& s) {
                 AddJobId(s);
                 AddReportOutputs(s);
                 s.Value(
                      "html", [](ClientArgs & a) -> auto& { return a.html; },
                      "Write a compare job's page (tables and SVG plots)")
                     .Path();
               }),
      exit_code, Report);
}

}  // namespace lrkv::cli
