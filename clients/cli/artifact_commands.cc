// `lrkv artifacts get JOB --out DIR`: a finished convert, heal or pipeline
// job's checkpoint, streamed from lrkvd (GetArtifact) into DIR with every
// file's sha256 checked; also what `--out` does for those commands run with
// --server.
#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "clients/cli/grpc_client.h"
#include "clients/cli/schema_flags.h"
#include "formats/safetensors.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {
namespace {

namespace fs = std::filesystem;

grpc::Status Local(grpc::StatusCode code, const std::string& message) {
  return grpc::Status(code, message);
}

// One file being received: its stream, running hash and expected size.
struct IncomingFile {
  std::string path;
  std::ofstream out;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> sha{EVP_MD_CTX_new(),
                                                              &EVP_MD_CTX_free};
  int64_t size = 0, received = 0;
};

std::string HexDigest(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  std::string hex;
  for (unsigned i = 0; i < len; ++i)
    absl::StrAppendFormat(&hex, "%02x", digest[i]);
  return hex;
}

// A path the server sent, safe to create under the download folder.
bool SafeRelative(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  for (const auto& part : fs::path(p)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

// Streams the artifact's files into `dir` (created here), checking each one.
grpc::Status Receive(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                     const std::string& job_id, const std::string& dir,
                     nlohmann::json* files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::GetArtifactRequest req;
  req.set_job_id(job_id);
  auto reader = stub.GetArtifact(&ctx, req);
  v1::ArtifactChunk chunk;
  std::unique_ptr<IncomingFile> file;
  *files = nlohmann::json::array();
  while (reader->Read(&chunk)) {
    if (file == nullptr || chunk.path() != file->path) {
      if (file != nullptr) {
        ctx.TryCancel();
        return (
            Local(grpc::StatusCode::DATA_LOSS,
                  file->path + ": the stream moved on before the file's end"));
      }
      if (!SafeRelative(chunk.path()) || chunk.offset() != 0) {
        ctx.TryCancel();
        return (Local(
            grpc::StatusCode::DATA_LOSS,
            "the server sent a bad artifact path or offset: " + chunk.path()));
      }
      file = std::make_unique<IncomingFile>();
      file->path = chunk.path();
      file->size = chunk.file_bytes();
      const fs::path target = fs::path(dir) / chunk.path();
      fs::create_directories(target.parent_path(), ec);
      file->out.open(target, std::ios::binary | std::ios::trunc);
      if (!file->out) {
        ctx.TryCancel();
        return (Local(grpc::StatusCode::INVALID_ARGUMENT,
                          target.string() + ": cannot write"));
      }
      EVP_DigestInit_ex(file->sha.get(), EVP_sha256(), nullptr);
    }
    if (chunk.offset() != file->received) {
      ctx.TryCancel();
      return (Local(grpc::StatusCode::DATA_LOSS,
                        absl::StrCat(file->path, ": chunk at ", chunk.offset(),
                                     ", expected ", file->received)));
    }
    file->out.write(chunk.data().data(),
                    static_cast<std::streamsize>(chunk.data().size()));
    EVP_DigestUpdate(file->sha.get(), chunk.data().data(), chunk.data().size());
    file->received += static_cast<int64_t>(chunk.data().size());
    if (!chunk.sha256().empty()) {
      file->out.close();
      const std::string got = HexDigest(file->sha.get());
      if (!file->out || file->received != file->size || got != chunk.sha256()) {
        ctx.TryCancel();
        return (
            Local(grpc::StatusCode::DATA_LOSS,
                  absl::StrCat(file->path, ": received ", file->received,
                               " of ", file->size, " bytes, sha256 ", got,
                               ", the server's ", chunk.sha256())));
      }
      files->push_back(
          {{"path", file->path}, {"bytes", file->size}, {"sha256", got}});
      file.reset();
    }
  }
  const grpc::Status st = reader->Finish();
  if (!st.ok()) return (st);
  if (file != nullptr) {
    return (Local(grpc::StatusCode::DATA_LOSS,
                      file->path + ": the stream ended mid-file"));
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status DownloadArtifact(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                              const std::string& job_id,
                              const std::string& out_dir,
                              nlohmann::json* files) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) &&
      !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec))) {
    return Local(grpc::StatusCode::INVALID_ARGUMENT,
                 out_dir + ": output folder exists and is not empty");
  }
  fs::create_directories(fs::absolute(out_dir, ec).parent_path(), ec);
  // Received into a partial sibling, renamed only once every file checked out.
  grpc::Status received;
  const absl::Status written =
      WriteDirectoryAtomically(out_dir, [&](const std::string& dir) {
        received = Receive(a, stub, job_id, dir, files);
        return received.ok() ? absl::OkStatus()
                             : absl::AbortedError(received.error_message());
      });
  if (!received.ok()) return received;
  if (!written.ok()) {
    return Local(grpc::StatusCode::INVALID_ARGUMENT,
                 std::string(written.message()));
  }
  return grpc::Status::OK;
}

namespace {

struct ArtifactArgs {
  std::string job, out;
};

const OptionSchema<ArtifactArgs>& ArtifactGetSchema() {
  using A = ArtifactArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("artifacts get");
    s.Value(
         "job", [](A & a) -> auto& { return a.job; }, "Job id")
        .Positional()
        .Required();
    s.Value(
         "out", [](A & a) -> auto& { return a.out; },
         "Folder to write (must not exist, or be empty)")
        .Path()
        .Required();
    return s;
  }();
  return schema;
}

int GetArtifact(const ArtifactArgs& a) {
  auto stub = Connect(Globals().conn);
  nlohmann::json files;
  const grpc::Status st =
      DownloadArtifact(Globals().conn, *stub, a.job, a.out, &files);
  if (!st.ok()) return RpcError(st);
  int64_t bytes = 0;
  for (const auto& f : files) bytes += f["bytes"].get<int64_t>();
  if (Globals().json) {
    std::printf(
        "%s\n",
        nlohmann::json({{"job_id", a.job}, {"out", a.out}, {"files", files}})
            .dump()
            .c_str());
  } else {
    std::printf("%s: %zu files, %lld bytes, sha256-checked, in %s\n",
                a.job.c_str(), files.size(), static_cast<long long>(bytes),
                a.out.c_str());
  }
  return kExitOk;
}

}  // namespace

void AddArtifactCommands(CLI::App& app, int* exit_code) {
  auto* artifacts = app.add_subcommand(
      "artifacts", "Download what a server job wrote (its checkpoint)");
  artifacts->require_subcommand(1);
  auto* get = artifacts->add_subcommand(
      "get",
      "A convert, heal or pipeline job's checkpoint folder, sha256-checked");
  AddSchemaCommand(get, ArtifactGetSchema(), exit_code, GetArtifact);
}

}  // namespace lrkv::cli
