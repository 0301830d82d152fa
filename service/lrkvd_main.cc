// `lrkvd`: the lrkv gRPC server. Loopback by default; stops cleanly on
// SIGTERM/SIGINT (queued jobs stay queued in the store and run at the next
// start).
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "base/allocator.h"
#include "runtime/blas_core.h"
#include "runtime/threads.h"
#include "service/server.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  lrkv::UseBestOpenBlasCore(argv);
  lrkv::ConfigureAllocator();
  CLI::App app{"lrkvd: the lrkv surgery and verification server"};
  lrkv::service::ServerOptions o;
  app.add_option("--listen", o.listen,
                 "host:port to listen on (port 0: any free port)");
  app.add_option("--data-dir", o.data_dir, "Database, reports and artifacts")
      ->required();
  app.add_option("--workers", o.workers, "Jobs run at once");
  app.add_option("--allow-dir", o.allowed_dirs,
                 "Folders RegisterCheckpoint may read");
  app.add_option("--max-upload-bytes", o.max_upload_bytes,
                 "Largest checkpoint UploadCheckpoint accepts")
      ->check(CLI::PositiveNumber);
  app.add_option("--reserve-bytes", o.reserve_bytes,
                 "Disk held back and given up when a job's end cannot be stored for lack "
                 "of space (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tls-cert", o.tls_cert_file,
                 "PEM certificate chain (TLS with --tls-key)");
  app.add_option("--tls-key", o.tls_key_file, "PEM private key");
  std::string token_file;
  app.add_option("--auth-token-file", token_file,
                 "File holding a bearer token every RPC must present");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    std::getline(in, o.auth_token);
    // A file saved with CRLF (or a trailing space) would otherwise hold a token no
    // client can send: HTTP/2 header values carry no CR.
    o.auth_token = std::string(absl::StripAsciiWhitespace(o.auth_token));
    if (!in && o.auth_token.empty()) {
      std::cerr << "lrkvd: error: " << token_file
                << ": cannot read the token\n";
      return 2;
    }
    if (o.auth_token.size() < 16) {
      std::cerr << "lrkvd: error: " << token_file
                << ": the token must have >= 16 characters\n";
      return 2;
    }
  }
  lrkv::ConfigureThreads();
  auto server = lrkv::service::LrkvServer::Start(o);
  if (!server.ok()) {
    std::cerr << "lrkvd: error: " << server.status().message() << "\n";
    return 3;
  }
  std::printf("lrkvd listening on port %d\n", (*server)->port());
  std::fflush(stdout);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  (*server)->Shutdown();
  return 0;
}
