// Local commands submitted to lrkvd as jobs (see remote.h).
#include "clients/cli/remote.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "clients/cli/commands.h"
#include "clients/cli/grpc_client.h"
#include "clients/cli/yaml_config.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {
namespace {

namespace fs = std::filesystem;

// Never parameters: output and mode options (the global ones are not the command's).
const std::set<std::string> kNotParams = {
    "detach", "checkpoint", "out", "json-out", "junit", "html", "help", "file"};
CLI::Option* Find(CLI::App* cmd, const std::string& name) {
  for (CLI::Option* o : cmd->get_options()) {
    if (o->get_single_name() == name) return o;
  }
  return nullptr;
}

// The job's parameters from the command's schema flags; a string in *out is a usage
// error (an option a job does not take).
grpc::Status SchemaParams(CLI::App* cmd, const RemoteSpec& spec, v1::Lrkv::Stub& stub,
                          nlohmann::json* out) {
  // What only a local run can take is refused, not silently dropped.
  for (CLI::Option* o : cmd->get_options()) {
    const std::string name = o->get_single_name();
    if (o->count() == 0 || kNotParams.count(name) || spec.flags->Owns(o)) continue;
    *out = "--" + name + " applies to a local `lrkv " + spec.flags->command() +
           "` only, not to a job on lrkvd";
    return grpc::Status::OK;
  }
  nlohmann::json params = spec.flags->Given();
  std::error_code ec;
  for (const OptionInfo* info : spec.flags->GivenInfos()) {
    if (info->scope == OptionScope::kLocalOnly) {
      *out = "--" + OptionFlagName(info->name) + " applies to a local `lrkv " +
             spec.flags->command() + "` only, not to a job on lrkvd";
      return grpc::Status::OK;
    }
    nlohmann::json& value = params[info->name];
    if (info->role == OptionRole::kPath && value.is_string()) {
      value = fs::absolute(value.get<std::string>(), ec).lexically_normal().string();
    } else if (info->role == OptionRole::kCheckpoint && value.is_string()) {
      v1::Checkpoint other;
      grpc::Status st = EnsureCheckpoint(Globals().conn, stub, value.get<std::string>(), &other);
      if (!st.ok()) return st;
      value = other.id();
    }
  }
  *out = std::move(params);
  return grpc::Status::OK;
}

}  // namespace

int RemoteJob::Run() const {
  auto stub = Connect(Globals().conn);
  // The checkpoint (and a heal teacher, a verify source) become server checkpoint ids.
  CLI::Option* ckpt_opt = Find(cmd_, "checkpoint");
  if (ckpt_opt == nullptr || ckpt_opt->count() == 0) {
    std::cerr << "lrkv: error: --checkpoint is required to run " << spec_.kind
              << " on a server\n";
    return kExitUsage;
  }
  v1::Checkpoint checkpoint;
  grpc::Status st =
      EnsureCheckpoint(Globals().conn, *stub, ckpt_opt->results()[0], &checkpoint);
  if (!st.ok()) return RpcError(st);
  nlohmann::json params;
  st = SchemaParams(cmd_, spec_, *stub, &params);
  if (!st.ok()) return RpcError(st);
  if (params.is_string()) return UsageError(params.get<std::string>());
  // The option file the values came from is stored with the job.
  if (nlohmann::json file = ConfigFileRecord(); !file.is_null()) params["config_file"] = file;
  // Uploaded checkpoints are stored under their hash: keep the user's name on
  // reports.
  if (Find(cmd_, "label") != nullptr && !params.contains("label")) {
    params["label"] = fs::path(ckpt_opt->results()[0]).filename().string();
  }
  ReportOutputs out;
  out.json = Globals().json;
  if (CLI::Option* j = Find(cmd_, "json-out"); j != nullptr && j->count() > 0) {
    out.json_file = j->results()[0];
  }
  if (CLI::Option* j = Find(cmd_, "junit"); j != nullptr && j->count() > 0) {
    out.junit = j->results()[0];
  }
  if (CLI::Option* h = Find(cmd_, "html"); h != nullptr && h->count() > 0) {
    out.html = h->results()[0];
  }
  // --out names where the local command would write its checkpoint: the server's is
  // downloaded there (it used to be ignored).
  if (CLI::Option* o = Find(cmd_, "out"); o != nullptr && o->count() > 0) {
    if (Detached()) {
      return UsageError("--out with --detach: nothing waits for the job; fetch its "
                        "checkpoint later with `lrkv artifacts get JOB --out DIR`");
    }
    out.artifact = o->results()[0];
  }
  v1::JobKind kind;
  ParseJobKind(spec_.kind, &kind);
  return SubmitAndReport(Globals().conn, *stub, kind, checkpoint.id(),
                         params.dump(), Detached(), out);
}

}  // namespace lrkv::cli
