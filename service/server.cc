// The lrkv.v1.Lrkv gRPC service (see server.h).
#include "service/server.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/constant_time.h"
#include "base/status_macros.h"
#include "base/tls_pair.h"
#include "formats/mapped_file.h"
#include "model/checkpoint.h"
#include "runtime/generate_bench.h"
#include "runtime/llama_weights.h"
#include "service/artifact_stream.h"
#include "service/checkpoint_import.h"
#include "service/content_hash.h"
#include "service/grpc_status.h"
#include "service/job_params.h"
#include "service/report_builder.h"
#include "service/store_integrity.h"
#include "surgery/conversion_options.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxAttempts = 3;

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

constexpr const char* kKinds[] = {"",      "convert", "heal",    "verify",
                                  "bench", "compare", "pipeline"};

std::string KindName(v1::JobKind k) { return k > 0 && k < 7 ? kKinds[k] : ""; }

v1::JobKind KindOf(const std::string& name) {
  for (int i = 1; i < 7; ++i) {
    if (name == kKinds[i]) return static_cast<v1::JobKind>(i);
  }
  return v1::JOB_KIND_UNSPECIFIED;
}

v1::JobState ToProto(JobState s) {
  return static_cast<v1::JobState>(static_cast<int>(s) + 1);
}

void FillJob(const JobRecord& j, v1::Job* out) {
  out->set_id(j.id);
  out->set_kind(KindOf(j.kind));
  out->set_checkpoint_id(j.checkpoint_id);
  out->set_params_json(j.params_json);
  out->set_state(ToProto(j.state));
  out->set_attempts(j.attempts);
  out->set_created_at(j.created_at);
  out->set_started_at(j.started_at);
  out->set_finished_at(j.finished_at);
  out->set_error(j.error);
}

void FillProgress(const JobEvent& e, JobState state, v1::JobProgress* p) {
  p->set_seq(e.seq);
  p->set_stage(e.stage);
  p->set_step(e.step);
  p->set_total(e.total);
  if (e.loss) p->set_loss(*e.loss);
  p->set_message(e.message);
  p->set_state(ToProto(state));
}

// Ids sort by creation time (milliseconds, then a counter), then a random
// suffix, so that jobs created within one second still list in submission
// order.
std::string NewJobId() {
  static std::mt19937_64 rng(std::random_device{}());
  static std::mutex mu;
  static int64_t last_ms = 0, counter = 0;
  std::lock_guard<std::mutex> lock(mu);
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  counter = ms == last_ms ? counter + 1 : 0;
  last_ms = ms;
  char buf[64];
  std::snprintf(buf, sizeof buf, "job-%013lld-%04lld-%06llx",
                static_cast<long long>(ms), static_cast<long long>(counter),
                static_cast<unsigned long long>(rng() & 0xffffff));
  return buf;
}

}  // namespace

class LrkvServer::Service final : public v1::Lrkv::Service {
 public:
  Service(Store* store, JobRunner* runner, UploadReceiver* uploads,
          ServerOptions options)
      : store_(store),
        runner_(runner),
        uploads_(uploads),
        options_(std::move(options)) {}

  // UNAUTHENTICATED unless the call carries the configured bearer token
  // (compared in constant time).
  grpc::Status Authorize(const grpc::ServerContext* ctx) const {
    if (options_.auth_token.empty()) return grpc::Status::OK;
    const auto& md = ctx->client_metadata();
    const auto it = md.find("authorization");
    const std::string expected = "Bearer " + options_.auth_token;
    if (it != md.end() &&
        ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()), expected)) {
      return grpc::Status::OK;
    }
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        "missing or wrong 'authorization: Bearer <token>' metadata");
  }

  grpc::Status UploadCheckpoint(
      grpc::ServerContext* ctx,
      grpc::ServerReader<v1::UploadCheckpointRequest>* reader,
      v1::Checkpoint* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    return ToGrpc(Upload(reader, out));
  }

  grpc::Status GetUploadStatus(grpc::ServerContext* ctx,
                               const v1::GetUploadStatusRequest* req,
                               v1::UploadStatus* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    auto p = uploads_->Progress(req->upload_id());
    if (!p.ok()) return ToGrpc(p.status());
    out->set_upload_id(req->upload_id());
    out->set_committed_bytes(p->committed_bytes);
    out->set_received_bytes(p->received_bytes);
    out->set_total_bytes(p->total_bytes);
    return grpc::Status::OK;
  }

  grpc::Status RegisterCheckpoint(grpc::ServerContext* ctx,
                                  const v1::RegisterCheckpointRequest* req,
                                  v1::Checkpoint* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    return ToGrpc(Register(req->path(), out));
  }

  grpc::Status SubmitJob(grpc::ServerContext* ctx,
                         const v1::SubmitJobRequest* req,
                         v1::Job* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    return ToGrpc(Submit(*req, out));
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    FillJob(*job, out);
    auto last = store_->LastEvent(req->job_id());
    if (!last.ok()) return ToGrpc(last.status());
    if (*last) FillProgress(**last, job->state, out->mutable_progress());
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* ctx,
                        const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    // Enums arrive as raw integers: a value outside the enum is the client's error.
    if (!v1::JobState_IsValid(req->state())) {
      return ToGrpc(Invalid(absl::StrCat("state ", static_cast<int>(req->state()),
                                         " is not a JobState; valid: 0 (any) to 5")));
    }
    if (!v1::JobKind_IsValid(req->kind())) {
      return ToGrpc(Invalid(absl::StrCat("kind ", static_cast<int>(req->kind()),
                                         " is not a JobKind; valid: 0 (any) to 6")));
    }
    JobFilter f;
    if (req->state() != v1::JOB_STATE_UNSPECIFIED) {
      f.state = static_cast<JobState>(static_cast<int>(req->state()) - 1);
    }
    f.kind = KindName(req->kind());
    f.checkpoint_id = req->checkpoint_id();
    const int64_t size = req->page_size() == 0 ? 100 : req->page_size();
    auto page = store_->ListJobs(f, size, req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    for (const auto& j : page->jobs) FillJob(j, out->add_jobs());
    out->set_next_page_token(page->next_page_token);
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* ctx,
                        const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobProgress>* writer) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    int64_t after = req->after_seq();
    while (!ctx->IsCancelled()) {
      auto job = store_->GetJob(req->job_id());
      if (!job.ok()) return ToGrpc(job.status());
      auto events = store_->Events(req->job_id(), after);
      if (!events.ok()) return ToGrpc(events.status());
      for (const auto& e : *events) {
        v1::JobProgress p;
        FillProgress(e, job->state, &p);
        if (!writer->Write(p)) return grpc::Status::OK;
        after = e.seq;
      }
      const bool done =
          job->state != JobState::kQueued && job->state != JobState::kRunning;
      if (done && events->empty()) return grpc::Status::OK;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "watch cancelled by the client");
  }

  grpc::Status CancelJob(grpc::ServerContext* ctx,
                         const v1::CancelJobRequest* req,
                         v1::Job* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    if (auto st = runner_->Cancel(req->job_id()); !st.ok()) return ToGrpc(st);
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    FillJob(*job, out);
    return grpc::Status::OK;
  }

  grpc::Status DeleteJob(grpc::ServerContext* ctx,
                         const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse*) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    if (job->state == JobState::kQueued || job->state == JobState::kRunning) {
      return ToGrpc(absl::FailedPreconditionError(absl::StrCat(
          "job '", req->job_id(), "' is ", JobStateName(job->state),
          "; cancel it before deleting")));
    }
    std::error_code ec;
    fs::remove(runner_->ReportPath(req->job_id()), ec);
    fs::remove(runner_->LogPath(req->job_id()), ec);
    fs::remove_all(runner_->ArtifactPath(req->job_id()), ec);
    return ToGrpc(store_->DeleteJob(req->job_id()));
  }

  grpc::Status GetArtifact(grpc::ServerContext* ctx, const v1::GetArtifactRequest* req,
                           grpc::ServerWriter<v1::ArtifactChunk>* writer) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    if (job->state != JobState::kSucceeded) {
      return ToGrpc(absl::FailedPreconditionError(
          absl::StrCat("job '", job->id, "' is ", JobStateName(job->state),
                       "; artifacts exist once it succeeds")));
    }
    if (job->kind != "convert" && job->kind != "heal" && job->kind != "pipeline") {
      return ToGrpc(absl::FailedPreconditionError(absl::StrCat(
          "job '", job->id, "' is a ", job->kind,
          " job, which writes no checkpoint (artifacts come from convert, heal and "
          "pipeline jobs); its results are in GetReport")));
    }
    return ToGrpc(StreamArtifact(runner_->ArtifactPath(job->id),
                                 [&](const v1::ArtifactChunk& c) {
                                   return !ctx->IsCancelled() && writer->Write(c);
                                 }));
  }

  grpc::Status GetReport(grpc::ServerContext* ctx,
                         const v1::GetReportRequest* req,
                         v1::Report* out) override {
    if (auto auth = Authorize(ctx); !auth.ok()) return auth;
    auto job = store_->GetJob(req->job_id());
    if (!job.ok()) return ToGrpc(job.status());
    out->set_job_id(job->id);
    out->set_kind(KindOf(job->kind));
    out->set_state(ToProto(job->state));
    if (job->state != JobState::kSucceeded) {
      return ToGrpc(absl::FailedPreconditionError(
          absl::StrCat("job '", job->id, "' is ", JobStateName(job->state),
                       "; reports exist once it succeeds")));
    }
    std::ifstream in(runner_->ReportPath(job->id));
    std::stringstream ss;
    ss << in.rdbuf();
    out->set_json(ss.str());
    return ToGrpc(FillReportSections(*store_, job->id, out));
  }

 private:
  absl::Status Register(const std::string& path, v1::Checkpoint* out) {
    if (path.empty()) return Invalid("path is required");
    // Each file is opened once, beneath its allowed folder, and what was opened is
    // staged into the data folder (checkpoint_import.h): jobs read that copy, so what a
    // client does to `path` afterwards cannot redirect them.
    const fs::path store_dir = fs::path(options_.data_dir) / "checkpoints";
    ASSIGN_OR_RETURN(ImportedCheckpoint imp,
                     ImportCheckpoint(path, options_.allowed_dirs, store_dir.string()));
    std::error_code ec;
    auto done = absl::MakeCleanup([&] { fs::remove_all(imp.staging_dir, ec); });
    // Messages name the client's path, not the staging copy.
    auto named = [&](const absl::Status& st) {
      return absl::Status(st.code(), absl::StrReplaceAll(st.message(), {{imp.staged, path}}));
    };
    absl::StatusOr<std::shared_ptr<const Checkpoint>> ckpt = Checkpoint::Open(imp.staged);
    if (!ckpt.ok()) return named(ckpt.status());
    // The same check as an upload's, so that both refuse a malformed file alike.
    if (auto st = CheckTensorSet(*ckpt); !st.ok()) return named(st);
    ASSIGN_OR_RETURN(std::string id, Sha256OfPath(imp.staged));
    const bool gguf = (*ckpt)->format() == CheckpointFormat::kGguf;
    const fs::path dest = store_dir / (gguf ? id + ".gguf" : id);
    // The same content, registered or uploaded before, is the same entry, once its
    // stored bytes are checked against the id again (PlaceInStore).
    RETURN_IF_ERROR(PlaceInStore(imp.staged, dest, id));
    if (auto existing = store_->GetCheckpoint(id); existing.ok()) {
      return Describe(*existing, **ckpt, out);
    }
    // The validated checkpoint stays mapped across the rename: no second parse.
    return Record(**ckpt, dest, id, out);
  }

  // Receives an upload (header, chunks, trailer), validates the checkpoint, and
  // moves it to data_dir/checkpoints/<sha256>[.gguf]. A malformed checkpoint is
  // discarded. The stream holds the upload from its header to its end (no other
  // stream writes it meanwhile), so the bytes hashed are the bytes stored.
  absl::Status Upload(grpc::ServerReader<v1::UploadCheckpointRequest>* reader,
                      v1::Checkpoint* out) {
    v1::UploadCheckpointRequest msg;
    // gRPC drops a failed read's status: a message it could not parse ends the
    // stream as if the client had, unless the parse says why (invalid UTF-8).
    auto unparsed = [] {
      const std::string field = proto_internal::TakeInvalidUtf8Field();
      return field.empty() ? absl::OkStatus()
                           : Invalid(absl::StrCat("request field '", field,
                                                  "' is not valid UTF-8 (proto3 strings are)"));
    };
    if (!reader->Read(&msg)) {
      RETURN_IF_ERROR(unparsed());
      return Invalid("the first UploadCheckpoint message must carry the header");
    }
    if (!msg.has_header()) {
      return Invalid("the first UploadCheckpoint message must carry the header");
    }
    UploadHeaderInfo h;
    h.upload_id = msg.header().upload_id();
    h.file_name = msg.header().file_name();
    h.total_bytes = msg.header().total_bytes();
    h.config_json = msg.header().config_json();
    h.tokenizer_json = msg.header().tokenizer_json();
    const uint64_t stream = uploads_->NewStream();
    RETURN_IF_ERROR(uploads_->Begin(h, stream).status());
    auto release = absl::MakeCleanup([&] { uploads_->Release(h.upload_id, stream); });
    // An upload that fails for good (a protocol error, a bad trailer) is removed
    // at once; one that merely stopped (no trailer yet, a chunk at the wrong
    // offset) stays for the client to resume.
    bool resumable = true;
    auto failed = absl::MakeCleanup([&] {
      if (!resumable) uploads_->Discard(h.upload_id, stream);
    });
    std::string sha;
    while (reader->Read(&msg)) {
      if (msg.has_chunk()) {
        if (absl::Status st = uploads_->Write(h.upload_id, stream, msg.chunk().offset(),
                                              msg.chunk().data());
            !st.ok()) {
          // A full disk: the partial upload would keep it full for every other client
          // and job, so its bytes go (the client starts again once there is room).
          if (absl::IsResourceExhausted(st)) {
            uploads_->Discard(h.upload_id, stream);
            return absl::ResourceExhaustedError(
                absl::StrCat(st.message(), "; upload '", h.upload_id,
                             "' was discarded to free its space: send it again once the "
                             "server has room"));
          }
          return st;
        }
      } else if (msg.has_trailer()) {
        sha = msg.trailer().sha256();
        break;
      } else {
        resumable = false;
        return Invalid(absl::StrCat(
            "after the header, messages carry a chunk or the trailer; upload '", h.upload_id,
            "' was discarded"));
      }
    }
    if (absl::Status st = unparsed(); !st.ok()) {
      resumable = false;
      return absl::InvalidArgumentError(
          absl::StrCat(st.message(), "; upload '", h.upload_id, "' was discarded"));
    }
    if (!sha.empty()) {
      v1::UploadCheckpointRequest extra;
      if (reader->Read(&extra)) {
        resumable = false;
        return Invalid(absl::StrCat("the trailer must be the last message of an upload; upload '",
                                    h.upload_id, "' was discarded"));
      }
    }
    if (sha.empty()) {
      ASSIGN_OR_RETURN(UploadProgress p, uploads_->Progress(h.upload_id));
      return absl::AbortedError(absl::StrCat(
          "upload '", h.upload_id, "' ended without a trailer after ",
          p.committed_bytes, " of ", p.total_bytes,
          " bytes; resume from GetUploadStatus.committed_bytes"));
    }
    // An incomplete upload stays for the rest; a hash mismatch is discarded by
    // Complete.
    ASSIGN_OR_RETURN(const std::string staged,
                     uploads_->Complete(h.upload_id, stream, sha));
    resumable = false;  // from here, the upload ends as a checkpoint or not at all
    absl::StatusOr<std::shared_ptr<const Checkpoint>> ckpt = Checkpoint::Open(staged);
    absl::Status valid = ckpt.status();
    if (valid.ok()) valid = CheckTensorSet(*ckpt);
    if (!valid.ok()) {
      uploads_->Discard(h.upload_id, stream);
      // Messages name the client's file, not the server's staging copy.
      return absl::InvalidArgumentError(absl::StrCat(
          "upload '", h.upload_id, "' (", h.file_name, ") is not a valid checkpoint: ",
          absl::StrReplaceAll(valid.message(), {{staged, h.file_name}})));
    }
    const bool gguf = (*ckpt)->format() == CheckpointFormat::kGguf;
    // A GGUF file's id is its sha256 (Complete checked the client's claim against the
    // bytes as stored); a folder's id hashes its model files.
    std::string id = sha;
    if (!gguf) {
      ASSIGN_OR_RETURN(id, Sha256OfPath(staged));
    }
    const fs::path dest = fs::path(options_.data_dir) / "checkpoints" /
                          (gguf ? id + ".gguf" : id);
    RETURN_IF_ERROR(PlaceInStore(staged, dest, id));
    uploads_->Discard(h.upload_id, stream);
    // The validated checkpoint stays mapped across the rename: no second parse.
    return Record(**ckpt, dest, id, out);
  }

  // Moves the verified `staged` checkpoint to its store entry `dest`, named by its
  // sha256 `id`. An entry already there is kept only when its bytes still hash to `id`
  // (then `staged` is left for the caller to remove); one that does not is moved to
  // data_dir/quarantine, reported on stderr, and replaced: a store entry is never
  // trusted over the bytes just verified.
  absl::Status PlaceInStore(const std::string& staged, const fs::path& dest,
                            const std::string& id) {
    std::lock_guard<std::mutex> lock(store_mu_);
    std::error_code ec;
    fs::create_directories(dest.parent_path(), ec);
    if (fs::exists(dest, ec)) {
      absl::StatusOr<std::string> stored = Sha256OfPath(dest.string());
      if (stored.ok() && *stored == id) return absl::OkStatus();
      absl::StatusOr<std::string> quarantine = Quarantine(options_.data_dir, dest.string());
      if (!quarantine.ok()) {
        return absl::InternalError(absl::StrCat(
            "checkpoint ", id, ": its store entry does not match its id and could not be "
            "quarantined: ", quarantine.status().message()));
      }
      std::fprintf(stderr,
                   "lrkvd: checkpoint %s: the stored entry's sha256 is %s, not its id; moved "
                   "to %s and replaced by the bytes just verified\n",
                   id.c_str(), stored.ok() ? stored->c_str() : "unreadable",
                   quarantine->c_str());
    }
    fs::rename(staged, dest, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("checkpoint ", id, ": cannot move it into the store: ", ec.message()));
    }
    return absl::OkStatus();
  }

  // Every tensor the config asks for is there with its shape and a float dtype, none
  // is left over, none holds NaN/Inf (LoadLlamaWeights as zero-copy views): a malformed
  // checkpoint is refused at registration, not in its first job. InvalidArgument.
  static absl::Status CheckTensorSet(const std::shared_ptr<const Checkpoint>& ckpt) {
    try {
      absl::Status st = LoadLlamaWeights(ckpt, StoredDtype()).status();
      return st.ok() ? st : absl::InvalidArgumentError(st.message());
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(e.what_without_backtrace());
    }
  }

  absl::Status Record(const Checkpoint& ckpt, const fs::path& real,
                      const std::string& id, v1::Checkpoint* out) {
    std::error_code ec;
    CheckpointRecord rec;
    rec.id = id;
    rec.format =
        ckpt.format() == CheckpointFormat::kGguf ? "gguf" : "safetensors";
    rec.architecture = ckpt.config().model_type;
    rec.path = real.string();
    rec.bytes = 0;
    if (fs::is_directory(real, ec)) {
      for (const auto& e : fs::directory_iterator(real, ec)) {
        if (e.is_regular_file())
          rec.bytes += static_cast<int64_t>(e.file_size());
      }
    } else {
      rec.bytes = static_cast<int64_t>(fs::file_size(real, ec));
    }
    rec.created_at = Now();
    RETURN_IF_ERROR(store_->PutCheckpoint(rec));
    return Describe(rec, ckpt, out);
  }

  static absl::Status Describe(const CheckpointRecord& rec, const Checkpoint& ckpt,
                               v1::Checkpoint* out) {
    out->set_id(rec.id);
    out->set_format(rec.format);
    out->set_architecture(rec.architecture);
    out->set_bytes(rec.bytes);
    out->set_layers(ckpt.config().num_layers);
    out->set_heads(ckpt.config().num_heads);
    out->set_kv_heads(ckpt.config().num_kv_heads);
    out->set_head_dim(ckpt.config().head_dim);
    out->set_created_at(rec.created_at);
    return absl::OkStatus();
  }

  absl::Status Submit(const v1::SubmitJobRequest& req, v1::Job* out) {
    const std::string kind = KindName(req.kind());
    if (kind.empty()) {
      return Invalid(absl::StrCat(
          "kind ", v1::JobKind_Name(req.kind()),
          " is not a job; valid: CONVERT, HEAL, VERIFY, BENCH, COMPARE, "
          "PIPELINE"));
    }
    ASSIGN_OR_RETURN(CheckpointRecord ckpt,
                     store_->GetCheckpoint(req.checkpoint_id()));
    // Inputs are opened once now and staged by content (checkpoint_import.h): the job
    // reads those copies, never the client's paths again. Text files become
    // inputs/<sha256>.txt; a checkpoint named by path (verify's source) is registered, as
    // RegisterCheckpoint would, and one named by id is that checkpoint.
    const std::string inputs_dir = (fs::path(options_.data_dir) / "inputs").string();
    ASSIGN_OR_RETURN(std::string params,
                     ReplaceInputPaths(req.params_json(), kTextInputKeys,
                                       [&](const std::string& path) {
                                         return ImportTextInput(path, options_.allowed_dirs,
                                                                inputs_dir);
                                       }));
    ASSIGN_OR_RETURN(params, ReplaceInputPaths(params, kCheckpointInputKeys,
                                               [&](const std::string& name) {
                                                 return StagedCheckpointPath(name);
                                               }));
    v1::SubmitJobRequest staged_req = req;
    staged_req.set_params_json(params);
    return SubmitStaged(staged_req, ckpt, kind, out);
  }

  // The stored copy a job reads for `name`: a registered checkpoint's id, or a path,
  // registered now.
  absl::StatusOr<std::string> StagedCheckpointPath(const std::string& name) {
    if (!absl::StartsWith(name, "/")) {
      auto rec = store_->GetCheckpoint(name);
      if (rec.ok()) return rec->path;
      return absl::InvalidArgumentError(absl::StrCat(
          "params_json: 'source' ", Shown(name),
          " is neither a registered checkpoint id nor an absolute server path"));
    }
    v1::Checkpoint registered;
    RETURN_IF_ERROR(Register(name, &registered));
    ASSIGN_OR_RETURN(CheckpointRecord rec, store_->GetCheckpoint(registered.id()));
    return rec.path;
  }

  absl::Status SubmitStaged(const v1::SubmitJobRequest& req, const CheckpointRecord& ckpt,
                            const std::string& kind, v1::Job* out) {
    // Parameters are checked now, so that a bad request fails at once.
    // Each kind's whole schema and limits, as its run would check them.
    if (kind == "convert") {
      ASSIGN_OR_RETURN(ConvertJobOptions o,
                       ParseConvertParams(req.params_json(), ckpt.path, ""));
      ASSIGN_OR_RETURN(auto opened, Checkpoint::Open(ckpt.path));
      RETURN_IF_ERROR(ValidateConvertJobOptions(o, *opened));
    } else if (kind == "verify") {
      ASSIGN_OR_RETURN(VerifyJobOptions o, ParseVerifyParams(req.params_json(), ckpt.path));
      RETURN_IF_ERROR(ValidateVerifyJobOptions(o));
      ASSIGN_OR_RETURN(auto opened, Checkpoint::Open(ckpt.path));
      RETURN_IF_ERROR(CheckSomethingToVerify(o, opened->config()));
    } else if (kind == "compare") {
      RETURN_IF_ERROR(
          ParseCompareParams(req.params_json(), ckpt.path, "").status());
    } else if (kind == "bench") {
      ASSIGN_OR_RETURN(auto opened, Checkpoint::Open(ckpt.path));
      RETURN_IF_ERROR(
          ParseBenchParams(req.params_json(), opened->config()).status());
    } else if (kind == "pipeline") {
      ASSIGN_OR_RETURN(PipelineParams pp,
                       ParsePipelineParams(req.params_json()));
      ASSIGN_OR_RETURN(ConvertJobOptions o,
                       ParseConvertParams(pp.convert_json, ckpt.path, ""));
      ASSIGN_OR_RETURN(auto opened, Checkpoint::Open(ckpt.path));
      RETURN_IF_ERROR(ValidateConvertJobOptions(o, *opened));
      ASSIGN_OR_RETURN(VerifyJobOptions v, ParseVerifyParams(pp.verify_json, ""));
      RETURN_IF_ERROR(ValidateVerifyJobOptions(v));
      // The heal stage trains the converted model, which does not exist yet: its
      // options are checked against the source, whose shape it keeps.
      if (!pp.heal_json.empty()) {
        ASSIGN_OR_RETURN(HealJobOptions h, ParseHealParams(pp.heal_json, ckpt.path, ""));
        h.teacher = ckpt.path;
        RETURN_IF_ERROR(ValidateHealJobOptions(h));
      }
      // The bench stage times the converted model, which keeps the source's shape.
      if (absl::Status st =
              ValidateGenerateBenchOptions(pp.bench, opened->config());
          !st.ok()) {
        return Invalid(absl::StrCat("params_json: bench: ", st.message()));
      }
    } else {
      ASSIGN_OR_RETURN(HealJobOptions h, ParseHealParams(req.params_json(), ckpt.path, ""));
      // The parsed "teacher" is a checkpoint id until it is resolved here.
      if (!h.teacher.empty()) {
        ASSIGN_OR_RETURN(CheckpointRecord t, store_->GetCheckpoint(h.teacher));
        h.teacher = t.path;
      }
      RETURN_IF_ERROR(ValidateHealJobOptions(h));
    }
    JobRecord job;
    job.id = NewJobId();
    job.kind = kind;
    job.checkpoint_id = ckpt.id;
    job.params_json = req.params_json().empty() ? "{}" : req.params_json();
    job.created_at = Now();
    RETURN_IF_ERROR(store_->CreateJob(job));
    if (auto st = runner_->Enqueue(job.id); !st.ok()) {
      // Refused (the queue is full): the job never existed for the client, so no row
      // stays behind for ListJobs to show.
      (void)store_->DeleteJob(job.id);
      return st;
    }
    FillJob(job, out);
    return absl::OkStatus();
  }

  Store* store_;
  JobRunner* runner_;
  UploadReceiver* uploads_;
  ServerOptions options_;
  // Serializes placing entries into the checkpoint store (PlaceInStore).
  std::mutex store_mu_;
};

namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Invalid(absl::StrCat(flag, " ", path, ": cannot read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// TLS when a certificate and key are given, plaintext otherwise (lrkvd listens
// on loopback by default).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return Invalid("--tls-cert and --tls-key go together");
  }
  if (o.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  // gRPC reports a pair it cannot use only as a port it cannot listen on.
  RETURN_IF_ERROR(CheckTlsPair(o.tls_cert_file, o.tls_key_file));
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain,
                   ReadWholeFile(o.tls_cert_file, "--tls-cert"));
  ASSIGN_OR_RETURN(pair.private_key,
                   ReadWholeFile(o.tls_key_file, "--tls-key"));
  ssl.pem_key_cert_pairs.push_back(pair);
  return grpc::SslServerCredentials(ssl);
}

// Takes the exclusive lock of data_dir/lrkvd.lock (flock, non-blocking) and writes this
// process's pid into it; FailedPrecondition naming the holder when another has it.
absl::StatusOr<int> LockDataDir(const std::string& data_dir) {
  const std::string path = (fs::path(data_dir) / "lrkvd.lock").string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::InternalError(absl::StrCat(path, ": flock: ", std::strerror(err)));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "data folder ", data_dir, " is in use by another lrkvd",
        n > 0 ? absl::StrCat(" (pid ", absl::StripAsciiWhitespace(holder), ")") : "",
        "; stop it or choose another --data-dir"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; it only names the holder for the message.
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LrkvServer>> LrkvServer::Start(
    const ServerOptions& o) {
  if (o.data_dir.empty()) return Invalid("--data-dir is required");
  if (o.max_queued_jobs < 1) return Invalid("the job queue must hold at least one job");
  if (o.workers < 1 || o.workers > 64) {
    return Invalid(
        absl::StrCat("--workers ", o.workers, " must lie in [1, 64]"));
  }
  std::error_code ec;
  fs::create_directories(o.data_dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat(o.data_dir, ": ", ec.message()));
  std::unique_ptr<LrkvServer> s(new LrkvServer());
  // One server per data folder: a second would re-queue the first's running jobs and
  // run them twice. The lock is held (and released by the kernel on any exit) for the
  // server's life.
  ASSIGN_OR_RETURN(s->lock_fd_, LockDataDir(o.data_dir));
  ASSIGN_OR_RETURN(s->store_,
                   Store::Open((fs::path(o.data_dir) / "lrkv.db").string(), o.reserve_bytes));
  RETURN_IF_ERROR(s->store_->RecoverRunningJobs(kMaxAttempts, Now()).status());
  RunnerOptions ro;
  ro.workers = o.workers;
  ro.max_queue = o.max_queued_jobs;
  ro.data_dir = o.data_dir;
  s->runner_ = std::make_unique<JobRunner>(s->store_.get(), ro);
  RETURN_IF_ERROR(s->runner_->Start());
  UploadOptions uo;
  uo.staging_dir = (fs::path(o.data_dir) / "uploads").string();
  uo.max_bytes = o.max_upload_bytes;
  ASSIGN_OR_RETURN(s->uploads_, UploadReceiver::Create(uo));
  s->service_ = std::make_unique<Service>(s->store_.get(), s->runner_.get(),
                                          s->uploads_.get(), o);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  ASSIGN_OR_RETURN(auto credentials, ServerCredentials(o));
  builder.AddListeningPort(o.listen, credentials, &s->port_);
  // gRPC sets SO_REUSEPORT by default, so a second server on a busy port would start
  // and take a random share of the connections; without it the bind fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Room for a 1 MiB chunk plus framing.
  builder.SetMaxReceiveMessageSize(2 << 20);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.listen, " (in use, or not an address here)"));
  }
  return s;
}

LrkvServer::~LrkvServer() {
  Shutdown();
  // After the workers stopped: the next server may take the folder only now.
  if (lock_fd_ >= 0) close(lock_fd_);
}

void LrkvServer::Shutdown() {
  if (server_)
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  if (runner_) runner_->Stop();
}

void LrkvServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace lrkv::service
