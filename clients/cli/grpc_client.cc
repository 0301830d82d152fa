// The shared lrkvd client pieces of `lrkv` (see grpc_client.h).
#include "clients/cli/grpc_client.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "nlohmann/json.hpp"
#include "study/compare_html.h"
#include "surgery/conversion_report.h"
#include "verify/verify_report.h"

namespace lrkv::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kChunkBytes = int64_t{1} << 20;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[32];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned i = 0; i < len; ++i)
    absl::StrAppendFormat(&out, "%02x", digest[i]);
  return out;
}

bool IsPemCertificate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  const bool ok = cert != nullptr;
  X509_free(cert);
  BIO_free(bio);
  return ok;
}

bool ShowBar() {
  return isatty(STDERR_FILENO) && Env("LRKV_NO_PROGRESS").empty();
}

void PrintProgress(const v1::JobProgress& p, bool bar) {
  if (bar) {
    const int width = 24;
    const int done =
        p.total() > 0 ? static_cast<int>(width * p.step() / p.total()) : 0;
    std::fprintf(stderr, "\r\033[K[%s%s] %s %lld/%lld %s",
                 std::string(done, '#').c_str(),
                 std::string(width - std::min(done, width), '.').c_str(),
                 p.stage().c_str(), static_cast<long long>(p.step()),
                 static_cast<long long>(p.total()), p.message().c_str());
    if (p.has_loss()) std::fprintf(stderr, " loss %.4f", p.loss());
  } else {
    std::fprintf(stderr, "[%lld] %s %lld/%lld %s",
                 static_cast<long long>(p.seq()), p.stage().c_str(),
                 static_cast<long long>(p.step()),
                 static_cast<long long>(p.total()), p.message().c_str());
    if (p.has_loss()) std::fprintf(stderr, " loss %.4f", p.loss());
    std::fprintf(stderr, "\n");
  }
  std::fflush(stderr);
}

// The verification report inside a job's JSON report (a verify job's whole report, a
// pipeline's "verify" stage), read back so that it prints as a local verify does.
std::optional<VerifyReport> VerificationOf(const v1::Report& r) {
  const nlohmann::json json = nlohmann::json::parse(r.json(), nullptr, false);
  if (!json.is_object()) return std::nullopt;
  const nlohmann::json* v = r.kind() == v1::VERIFY ? &json
                            : json.contains("verify") ? &json["verify"]
                                                      : nullptr;
  if (v == nullptr) return std::nullopt;
  auto report = VerifyReportFromJson(*v);
  if (!report.ok()) return std::nullopt;
  return *report;
}

// The local verify's JUnit (classnames lrkv.equivalence / lrkv.cache, <skipped> for
// n/a, failures with value, bound and rule) when the job's report holds a
// verification; otherwise one testcase per stored check, as close to it as they allow.
void WriteJUnit(const v1::Report& r, const std::string& path) {
  std::ofstream out(path);
  if (auto v = VerificationOf(r)) {
    out << v->ToJUnit();
    return;
  }
  int failures = 0, skipped = 0;
  for (const auto& c : r.verification().checks()) {
    if (c.verdict() == "n/a") {
      ++skipped;
    } else if (!c.passed()) {
      ++failures;
    }
  }
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  "
         "<testsuite name=\"lrkv "
      << r.job_id() << "\" tests=\"" << r.verification().checks_size()
      << "\" failures=\"" << failures << "\" skipped=\"" << skipped << "\">\n";
  for (const auto& c : r.verification().checks()) {
    out << "    <testcase classname=\"lrkv\" name=\"" << XmlEscape(c.name()) << "\">";
    if (c.verdict() == "n/a") {
      out << "<skipped message=\"" << XmlEscape(c.detail()) << "\"/>";
    } else if (!c.passed()) {
      out << "<failure message=\"" << XmlEscape(c.verdict() + ": " + c.detail())
          << "\"/>";
    }
    out << "</testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
}

void PrintSummary(const v1::Report& r) {
  std::printf("job %s (%s)\n", r.job_id().c_str(),
              v1::JobKind_Name(r.kind()).c_str());
  const nlohmann::json json = nlohmann::json::parse(r.json(), nullptr, false);
  // A conversion (a convert job's, a pipeline's first stage) prints the table a local
  // `lrkv convert` prints, from the same report.
  const nlohmann::json* conversion =
      r.kind() == v1::CONVERT && json.is_object()                      ? &json
      : json.is_object() && json.contains("convert") && json["convert"].is_object()
          ? &json["convert"]
          : nullptr;
  if (conversion != nullptr) {
    std::printf("%s\n", ConversionTableFromJson(*conversion).c_str());
  } else if (r.has_conversion()) {
    const auto& c = r.conversion();
    std::printf(
        "conversion  %s: cache %.2f%% of the source, K/V params %.2f%%, %.2f "
        "s\n",
        c.config().c_str(), 100 * c.cache_ratio_to_source(),
        100 * c.kv_param_ratio_to_source(), c.wall_seconds());
  }
  for (const auto& e : r.evaluations()) {
    std::printf("perplexity  %-16s %.4f (%lld tokens)\n", e.label().c_str(),
                e.perplexity(), static_cast<long long>(e.tokens()));
  }
  if (r.loss_curve_size() > 0) {
    const auto& last = r.loss_curve(r.loss_curve_size() - 1);
    std::printf("training    %d points, last %s step %lld loss %.4f\n",
                r.loss_curve_size(), last.kind().c_str(),
                static_cast<long long>(last.step()), last.loss());
  }
  const std::optional<VerifyReport> verification = VerificationOf(r);
  if (verification) std::printf("\n%s", verification->ToTable().c_str());
  for (const auto& c : r.verification().checks()) {
    if (verification) break;  // the table above says it all
    // One line per check; the whole message (bound, rule) where it failed.
    const bool na = absl::StartsWith(c.verdict(), "n/a");
    const bool equivalence = c.bound() > 0;
    std::printf("check       %-28s %-4s", c.name().c_str(),
                c.verdict() == "n/a" ? "n/a" : c.passed() ? "pass" : "FAIL");
    if (equivalence) {
      std::printf(" %s  error %.3g bound %.3g ratio %.3g", c.verdict().c_str(), c.error(),
                  c.bound(), c.ratio());
    }
    if (na || !equivalence || !c.passed()) std::printf("  %s", c.detail().c_str());
    std::printf("\n");
  }
  for (const auto& l : r.latency()) {
    // Whole-model rows have no bandwidth figure (they move more than the
    // cache).
    const std::string gbps =
        l.gbps() > 0 ? absl::StrFormat("%7.2f GB/s", l.gbps()) : "";
    std::printf("latency     %-18s %-16s L=%-6lld %8.3f ms  %.3fx vs MHA %s\n",
                l.variant().c_str(), l.engine().c_str(),
                static_cast<long long>(l.context()), l.median_ms(),
                l.ratio_to_mha(), gbps.c_str());
  }
  if (r.comparison_size() > 0) {
    auto study =
        CompareReportFromJson(nlohmann::json::parse(r.json(), nullptr, false));
    if (study.ok()) std::printf("\n%s", study->ToTable().c_str());
  }
  if (r.has_verification() && !verification) {
    std::printf("verification: %s\n",
                r.verification().passed() ? "PASS" : "FAIL");
  }
}

}  // namespace

std::string ServerAddress(const ConnectionArgs& a) {
  if (!a.server.empty()) return a.server;
  const std::string env = Env("LRKV_SERVER");
  return env.empty() ? "127.0.0.1:50051" : env;
}

namespace {

// Exits with kExitUsage naming the file: a token or CA file given but unusable is the
// command line's mistake, not something to ignore (a missing --token-file used to be
// sent as no token) or hand to gRPC (a bad CA filled stderr with gRPC core logs).
[[noreturn]] void BadConnectionFile(const std::string& flag, const std::string& path,
                                    const std::string& why) {
  std::cerr << "lrkv: error: " << flag << " " << path << ": " << why << "\n";
  std::exit(kExitUsage);
}

std::string TokenFile(const ConnectionArgs& a) {
  return a.token_file.empty() ? Env("LRKV_TOKEN_FILE") : a.token_file;
}

}  // namespace

std::unique_ptr<v1::Lrkv::Stub> Connect(const ConnectionArgs& a) {
  const std::string token_path = TokenFile(a);
  if (!token_path.empty()) {
    std::string token;
    if (!ReadWholeFile(token_path, &token)) {
      BadConnectionFile("--token-file", token_path, "cannot read");
    }
    if (absl::StripAsciiWhitespace(token).empty()) {
      BadConnectionFile("--token-file", token_path, "is empty");
    }
  }
  std::string ca_path = a.tls_ca.empty() ? Env("LRKV_TLS_CA") : a.tls_ca;
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (!ca_path.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!ReadWholeFile(ca_path, &ssl.pem_root_certs)) {
      BadConnectionFile("--tls-ca", ca_path, "cannot read");
    }
    if (!IsPemCertificate(ssl.pem_root_certs)) {
      BadConnectionFile("--tls-ca", ca_path, "holds no PEM certificate");
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(2 << 20);
  return v1::Lrkv::NewStub(
      grpc::CreateCustomChannel(ServerAddress(a), creds, args));
}

void Authorize(const ConnectionArgs& a, grpc::ClientContext* ctx) {
  const std::string path = TokenFile(a);
  if (path.empty()) return;
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  token = std::string(absl::StripAsciiWhitespace(token));  // a CRLF file, as lrkvd reads it
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

int ExitCodeFor(const grpc::Status& st) {
  return ExitCodeFor(static_cast<absl::StatusCode>(st.error_code()));
}

int RpcError(const grpc::Status& st) {
  const std::string address = ServerAddress(Globals().conn);
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (Globals().conn.server.empty() && Env("LRKV_SERVER").empty()) {
        // Nothing said where: say that the address tried is only the default.
        std::cerr << "lrkv: error: cannot reach lrkvd at " << address
                  << ", the default address (no --server or $LRKV_SERVER given; this "
                     "command runs on lrkvd: start one, or say where it is)";
      } else {
        std::cerr << "lrkv: error: cannot reach lrkvd at " << address
                  << " (is it running? --server or $LRKV_SERVER says where; with TLS, "
                     "--tls-ca)";
      }
      if (Globals().verbose) std::cerr << ": " << st.error_message();
      std::cerr << "\n";
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      std::cerr << "lrkv: error: lrkvd at " << address << " refused the credentials ("
                << st.error_message() << "); give its token with --token-file or "
                << "$LRKV_TOKEN_FILE\n";
      break;
    default:
      std::cerr << "lrkv: error: " << st.error_message() << " ("
                << absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code()))
                << ")\n";
  }
  return ExitCodeFor(st);
}

grpc::Status UploadCheckpointFile(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                                  const std::string& path,
                                  v1::Checkpoint* out) {
  std::error_code ec;
  std::string file = path, config, tokenizer;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "model.safetensors").string();
    if (!fs::exists(file, ec)) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          path +
              ": uploads take a .gguf file or a folder with one "
              "model.safetensors (sharded checkpoints: register them)");
    }
    if (!ReadWholeFile((fs::path(path) / "config.json").string(), &config)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          path + ": no config.json");
    }
    ReadWholeFile((fs::path(path) / "tokenizer.lrkv.json").string(),
                  &tokenizer);
  }
  std::string data;
  if (!ReadWholeFile(file, &data)) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, file + ": cannot read");
  }
  const std::string sha = Sha256Hex(data);
  // The same file (and config) always gets the same upload id, so a rerun
  // resumes.
  const std::string upload_id =
      "up-" + Sha256Hex(sha + config + tokenizer).substr(0, 40);
  int64_t committed = 0;
  {
    grpc::ClientContext ctx;
    Authorize(a, &ctx);
    v1::GetUploadStatusRequest req;
    req.set_upload_id(upload_id);
    v1::UploadStatus st;
    if (stub.GetUploadStatus(&ctx, req, &st).ok() &&
        st.total_bytes() == static_cast<int64_t>(data.size())) {
      committed = st.committed_bytes();
    }
  }
  if (committed > 0) {
    std::fprintf(stderr, "resuming upload of %s at byte %lld\n", file.c_str(),
                 static_cast<long long>(committed));
  }
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  auto writer = stub.UploadCheckpoint(&ctx, out);
  v1::UploadCheckpointRequest msg;
  auto* h = msg.mutable_header();
  h->set_upload_id(upload_id);
  h->set_file_name(fs::path(file).filename().string());
  h->set_total_bytes(static_cast<int64_t>(data.size()));
  h->set_config_json(config);
  h->set_tokenizer_json(tokenizer);
  bool open = writer->Write(msg);
  for (int64_t off = committed; open && off < static_cast<int64_t>(data.size());
       off += kChunkBytes) {
    v1::UploadCheckpointRequest c;
    c.mutable_chunk()->set_offset(off);
    c.mutable_chunk()->set_data(data.substr(off, kChunkBytes));
    open = writer->Write(c);
  }
  if (open) {
    v1::UploadCheckpointRequest t;
    t.mutable_trailer()->set_sha256(sha);
    writer->Write(t);
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status EnsureCheckpoint(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                              const std::string& path, v1::Checkpoint* out) {
  std::error_code ec;
  const std::string absolute =
      fs::absolute(path, ec).lexically_normal().string();
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::RegisterCheckpointRequest req;
  req.set_path(absolute);
  const grpc::Status st = stub.RegisterCheckpoint(&ctx, req, out);
  // The server cannot read it (another machine, or outside its folders): send
  // it.
  if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
      (st.error_code() == grpc::StatusCode::NOT_FOUND &&
       fs::exists(path, ec))) {
    return UploadCheckpointFile(a, stub, path, out);
  }
  return st;
}

bool ParseJobKind(const std::string& name, v1::JobKind* kind) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  return v1::JobKind_Parse(upper, kind) && *kind != v1::JOB_KIND_UNSPECIFIED;
}

int FetchAndEmitReport(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                       const std::string& job_id, const ReportOutputs& out) {
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::GetReportRequest req;
  req.set_job_id(job_id);
  v1::Report report;
  const grpc::Status st = stub.GetReport(&ctx, req, &report);
  if (!st.ok()) return RpcError(st);
  return EmitReport(report, out);
}

int SubmitAndReport(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                    v1::JobKind kind, const std::string& checkpoint_id,
                    const std::string& params_json, bool detach,
                    const ReportOutputs& out) {
  v1::Job job;
  {
    grpc::ClientContext ctx;
    Authorize(a, &ctx);
    v1::SubmitJobRequest req;
    req.set_kind(kind);
    req.set_checkpoint_id(checkpoint_id);
    req.set_params_json(params_json);
    const grpc::Status st = stub.SubmitJob(&ctx, req, &job);
    if (!st.ok()) return RpcError(st);
  }
  // Detached, the id is the result (on stdout, as JSON with --json); followed, stdout
  // carries the report alone and the id goes to stderr beside the progress.
  if (detach) {
    if (out.json) {
      std::printf("%s\n", nlohmann::json({{"job_id", job.id()}}).dump().c_str());
    } else {
      std::printf("%s\n", job.id().c_str());
    }
    return kExitOk;
  }
  std::fprintf(stderr, "job %s submitted to %s\n", job.id().c_str(),
               ServerAddress(a).c_str());
  const grpc::Status st = FollowJob(a, stub, job.id(), &job);
  if (!st.ok()) return RpcError(st);
  if (job.state() != v1::SUCCEEDED) {
    std::cerr << "lrkv: error: job " << job.id() << " ended "
              << v1::JobState_Name(job.state())
              << (job.error().empty() ? "" : ": " + job.error()) << "\n";
    return kExitServer;
  }
  const int rc = FetchAndEmitReport(a, stub, job.id(), out);
  if (out.artifact.empty() || rc == kExitServer || rc == kExitUsage) return rc;
  nlohmann::json files;
  const grpc::Status got = DownloadArtifact(a, stub, job.id(), out.artifact, &files);
  if (!got.ok()) return RpcError(got);
  std::fprintf(stderr, "downloaded job %s's checkpoint (%zu files, sha256-checked) to %s\n",
               job.id().c_str(), files.size(), out.artifact.c_str());
  return rc;
}

grpc::Status FollowJob(const ConnectionArgs& a, v1::Lrkv::Stub& stub,
                       const std::string& job_id, v1::Job* job, int64_t after_seq) {
  const bool bar = ShowBar();
  {
    grpc::ClientContext ctx;
    Authorize(a, &ctx);
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_after_seq(after_seq);
    auto reader = stub.WatchJob(&ctx, req);
    v1::JobProgress p;
    while (reader->Read(&p)) PrintProgress(p, bar);
    if (bar) std::fprintf(stderr, "\n");
    const grpc::Status st = reader->Finish();
    if (!st.ok()) return st;
  }
  grpc::ClientContext ctx;
  Authorize(a, &ctx);
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  return stub.GetJob(&ctx, req, job);
}

int EmitReport(const v1::Report& r, const ReportOutputs& out) {
  if (out.json) {
    std::cout << r.json();
    if (!r.json().empty() && r.json().back() != '\n') std::cout << "\n";
  } else {
    PrintSummary(r);
  }
  if (!out.json_file.empty()) {
    if (auto st = WriteTextFile(out.json_file, r.json()); !st.ok()) return Fail(st);
  }
  if (!out.junit.empty()) WriteJUnit(r, out.junit);
  if (!out.html.empty()) {
    auto study =
        CompareReportFromJson(nlohmann::json::parse(r.json(), nullptr, false));
    if (!study.ok()) {
      std::cerr << "lrkv: error: --html: job " << r.job_id()
                << " is not a compare job (no comparison rows)\n";
      return kExitUsage;
    }
    std::ofstream html(out.html);
    html << CompareReportHtml(*study, absl::StrCat("lrkvd job ", r.job_id()));
    if (!html) {
      std::cerr << "lrkv: error: " << out.html << ": cannot write\n";
      return kExitFailure;
    }
  }
  return r.has_verification() && !r.verification().passed() ? kExitFailure
                                                            : kExitOk;
}

}  // namespace lrkv::cli
