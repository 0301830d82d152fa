// `lrkv serve`: the OpenAI-compatible HTTP server over one checkpoint (serve/).
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/option_schema.h"
#include "base/status_macros.h"
#include "clients/cli/commands.h"
#include "clients/cli/schema_flags.h"
#include "clients/cli/shared_options.h"
#include "clients/cli/stage_progress.h"
#include "runtime/cache_dtype.h"
#include "runtime/language_model.h"
#include "runtime/threads.h"
#include "serve/openai_server.h"
#include "serve/serve_bench.h"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"
#include "tokenizer/chat_template.h"

namespace lrkv::cli {
namespace {

struct ServeArgs {
  std::string checkpoint;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string tls_cert, tls_key, api_key_file;
  std::string model_id;
  uint64_t kv_memory = uint64_t{2} << 30;
  int64_t max_seqs = 16;
  int64_t max_queue = 64;
  int64_t ctx = 4096;
  int threads = 0;
  std::string cache_dtype = "bf16";
  std::string mode = "auto";
  std::string products = "bf16";
  std::string chat_template_file;
  // The HTTP edge (serve/http/http_server.h).
  uint64_t max_body = uint64_t{1} << 20;
  uint64_t max_header = uint64_t{16} << 10;
  int64_t max_headers = 100;
  double request_timeout = 10, idle_timeout = 30, write_timeout = 30;
  int64_t max_connections = 256;
  double shutdown_timeout = 5;
};

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// SIGINT and SIGTERM, blocked in every thread (the mask is inherited, so this
// runs before any thread starts) and taken by a thread of their own: the first
// drains the server (OpenAiServer::Shutdown), a second stops it at once.
class SignalStopper {
 public:
  SignalStopper() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  ~SignalStopper() { Join(); }
  // Ends the watch; returns once a drain under way has returned.
  void Join() {
    done_ = true;
    if (waiter_.joinable()) waiter_.join();
    if (drainer_.joinable()) drainer_.join();
  }
  void Watch(OpenAiServer* server) {
    waiter_ = std::thread([this, server] {
      const timespec tick{0, 100 * 1000 * 1000};
      while (!done_) {
        const int sig = sigtimedwait(&set_, nullptr, &tick);
        if (sig < 0) continue;
        if (!drainer_.joinable()) {
          std::fprintf(stderr,
                       "lrkv serve: %s: draining (again to stop at once)\n",
                       strsignal(sig));
          drainer_ = std::thread([server] { server->Shutdown(); });
        } else {
          server->Stop();
        }
      }
    });
  }

 private:
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread waiter_, drainer_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The bearer token of --api-key FILE: its first line, without surrounding
// whitespace.
absl::StatusOr<std::string> ApiKey(const std::string& path) {
  if (path.empty()) return std::string();
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, "--api-key"));
  const size_t end = text.find_first_of("\r\n");
  std::string key = text.substr(0, end);
  key.erase(0, key.find_first_not_of(" \t"));
  key.erase(key.find_last_not_of(" \t") + 1);
  if (key.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("--api-key ", path, " is empty"));
  return key;
}

absl::StatusOr<ServeOptions> OptionsOf(const ServeArgs& a,
                                       const LanguageModel& model) {
  ServeOptions o;
  o.host = a.host;
  o.port = a.port;
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  ASSIGN_OR_RETURN(o.api_key, ApiKey(a.api_key_file));
  o.http.max_body_bytes = a.max_body;
  o.http.max_header_bytes = a.max_header;
  o.http.max_headers = a.max_headers;
  o.http.request_timeout = Millis(a.request_timeout);
  o.http.idle_timeout = Millis(a.idle_timeout);
  o.http.write_timeout = Millis(a.write_timeout);
  o.http.max_connections = a.max_connections;
  o.shutdown_timeout = Millis(a.shutdown_timeout);
  o.model_id = a.model_id.empty()
                   ? std::filesystem::path(a.checkpoint).filename().string()
                   : a.model_id;
  if (o.model_id.empty())
    o.model_id = std::filesystem::path(a.checkpoint).parent_path().filename();
  o.batcher.kv_memory = static_cast<int64_t>(a.kv_memory);
  o.batcher.max_seqs = a.max_seqs;
  o.batcher.max_queue = a.max_queue;
  o.batcher.context = a.ctx;
  ASSIGN_OR_RETURN(const CacheDtype cache, ParseCacheDtype(a.cache_dtype));
  o.batcher.cache_dtype = cache.kind;
  o.batcher.mode = a.mode;
  if (!a.chat_template_file.empty()) {
    ASSIGN_OR_RETURN(o.chat_template,
                     ReadFile(a.chat_template_file, "--chat-template"));
  } else {
    o.chat_template = ChatTemplateSource(model.tokenizer());
  }
  return o;
}

// What --kv-memory holds: sequences of --ctx tokens in this checkpoint's cache,
// and in its source's (2·H_kv·d_h per layer and token).
void PrintCapacity(const ServeArgs& a, const LanguageModel& model,
                   const ContinuousBatcher& b) {
  const int64_t per_seq = b.CacheBytes(a.ctx);
  const ModelConfig& c = model.config();
  const int64_t source_per_seq = kernels::CacheBytes(
      b.options().cache_dtype,
      SourceCacheElements(ShapeOf(c)) * c.num_layers * a.ctx);
  const int64_t kv = b.options().kv_memory;
  std::fprintf(stderr,
               "lrkv serve: KV memory %s bytes; a %lld-token sequence caches "
               "%s bytes in this "
               "checkpoint's %s layout (decode engine %s): %lld sequences fit",
               absl::StrFormat("%d", kv).c_str(), static_cast<long long>(a.ctx),
               absl::StrFormat("%d", per_seq).c_str(),
               KvLayoutName(c.kv.layout), DecodeModeName(b.mode()),
               static_cast<long long>(b.SequencesThatFit(a.ctx)));
  if (c.kv.Factored()) {
    std::fprintf(
        stderr, "; in its source's layout %s bytes: %lld sequences",
        absl::StrFormat("%d", source_per_seq).c_str(),
        static_cast<long long>(source_per_seq > 0 ? kv / source_per_seq : 0));
  }
  std::fprintf(stderr, " (at most %lld at once, --max-seqs)\n",
               static_cast<long long>(a.max_seqs));
}

int RunServe(const ServeArgs& a) {
  SignalStopper signals;
  ConfigureThreads(a.threads);
  LanguageModelOptions mo;
  mo.bf16_activations = a.products == "bf16";
  auto model = LanguageModel::Load(a.checkpoint, mo);
  if (!model.ok()) return Fail(model.status());
  auto options = OptionsOf(a, **model);
  if (!options.ok()) return Fail(options.status());
  auto server = OpenAiServer::Create(**model, *options);
  if (!server.ok()) return Fail(server.status());
  auto port = (*server)->Bind();
  if (!port.ok()) return Fail(port.status());
  PrintCapacity(a, **model, (*server)->batcher());
  std::fprintf(stderr, "lrkv serve: model '%s' on %s://%s:%d (threads %d)\n",
               options->model_id.c_str(),
               options->tls_cert.empty() ? "http" : "https",
               options->host.c_str(), *port, ThreadCount());
  signals.Watch(server->get());
  (*server)->Run();
  signals.Join();
  std::fprintf(stderr, "lrkv serve: stopped\n");
  return kExitOk;
}

struct ServeBenchArgs {
  ServeBenchOptions o;
  uint64_t kv_memory = uint64_t{1} << 30;
  std::string cache_dtype = "bf16";
  std::string products = "bf16";
  std::string json_out;
  int threads = 0;
};

int RunServeBench(ServeBenchArgs a) {
  ConfigureThreads(a.threads);
  a.o.batcher.kv_memory = static_cast<int64_t>(a.kv_memory);
  auto cache = ParseCacheDtype(a.cache_dtype);
  if (!cache.ok()) return Fail(cache.status());
  a.o.batcher.cache_dtype = cache->kind;
  a.o.bf16_products = a.products == "bf16";
  StageProgress progress("bench serve");
  a.o.progress = progress.Sink();
  auto report = RunServeBench(a.o);
  progress.Finish();
  if (!report.ok()) return Fail(report.status());
  nlohmann::json j = report->ToJson();
  j["threads"] = ThreadCount();
  return EmitLocalReport(j, report->ToText(), a.json_out);
}

// The KV cache options both commands take.
template <typename A>
void AddCacheOptions(OptionSchema<A>& s) {
  s.Value(
       "cache_dtype", [](A & a) -> auto& { return a.cache_dtype; },
       "Storage of the KV cache: bf16, f32, q8 (ggml's Q8_0, 8.5 bits a "
       "value), q4 (Q4_0, 4.5 bits); --kv-memory admits by its bytes")
      .Choices(CacheDtypeNames());
  AddThreadsOption(
      s, [](A & a) -> auto& { return a.threads; });
  AddProductsOption(
      s, [](A & a) -> auto& { return a.products; });
}

const OptionSchema<ServeBenchArgs>& ServeBenchSchema() {
  using A = ServeBenchArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("bench serve");
    AddCheckpointOption(
        s, [](A & a) -> auto& { return a.o.checkpoint; },
        "Checkpoint served (source or converted)");
    s.Value(
         "source", [](A & a) -> auto& { return a.o.source; },
         "Its source, measured in the same run at the same KV memory")
        .Path();
    s.Value(
         "clients", [](A & a) -> auto& { return a.o.clients; },
         "Concurrent streams")
        .Min(1);
    s.Value(
         "requests", [](A & a) -> auto& { return a.o.requests; },
         "Requests per stream in the batching phase")
        .Min(1);
    s.Value(
        "prompt_tokens", [](A & a) -> auto& { return a.o.prompt_tokens; },
        "Prompt tokens of a request");
    s.Value(
        "max_tokens", [](A & a) -> auto& { return a.o.max_tokens; },
        "Tokens generated per request");
    s.Bytes(
        "kv_memory", [](A & a) -> auto& { return a.kv_memory; },
        "The server's KV memory", "1GiB");
    s.Value(
         "max_seqs", [](A & a) -> auto& { return a.o.batcher.max_seqs; },
         "The server's most sequences at once")
        .Min(1);
    s.Value(
         "ctx", [](A & a) -> auto& { return a.o.batcher.context; },
         "The server's context (and the admission phase's sequences)")
        .Min(1);
    s.Value(
         "engine_steps", [](A & a) -> auto& { return a.o.engine_steps; },
         "Then the engines alone: this many 1-sequence and "
         "--clients-sequence decode steps alternated at --ctx (0: none)")
        .Min(0);
    s.Value(
        "soak_seconds", [](A & a) -> auto& { return a.o.soak_seconds; },
        "Then random lengths and abandoned streams for this long (0: no soak)");
    s.Value(
        "abort_share", [](A & a) -> auto& { return a.o.abort_share; },
        "Share of soak requests abandoned mid-stream");
    AddCacheOptions(s);
    AddJsonOutOption(
        s, [](A & a) -> auto& { return a.json_out; });
    return s;
  }();
  return schema;
}

// The server's own options: where it listens, who may call, the batcher's
// limits, the decode engine and the HTTP edge's limits.
template <typename A>
void AddListenOptions(OptionSchema<A>& s) {
  AddCheckpointOption(
      s, [](A & a) -> auto& { return a.checkpoint; },
      "GGUF file or safetensors directory (source or converted)");
  s.Value(
      "host", [](A & a) -> auto& { return a.host; }, "Address to listen on");
  s.Value(
       "port", [](A & a) -> auto& { return a.port; },
       "Port to listen on (0: any free port)")
      .Range(0, 65535);
  s.Value(
       "tls_cert", [](A & a) -> auto& { return a.tls_cert; },
       "PEM certificate: serve HTTPS (with --tls-key)")
      .Path();
  s.Value(
       "tls_key", [](A & a) -> auto& { return a.tls_key; },
       "PEM private key of --tls-cert")
      .Path();
  s.Value(
       "api_key", [](A & a) -> auto& { return a.api_key_file; },
       "File whose first line is the Bearer token every /v1/ request must "
       "carry")
      .Path();
  s.Value(
      "model_id", [](A & a) -> auto& { return a.model_id; },
      "The model's name in /v1/models (default: the checkpoint's file name)");
}

template <typename A>
void AddBatcherOptions(OptionSchema<A>& s) {
  s.Bytes(
      "kv_memory", [](A & a) -> auto& { return a.kv_memory; },
      "Bytes the KV caches of all running sequences may hold (2GiB, 500MB)",
      "2GiB");
  s.Value(
       "max_seqs", [](A & a) -> auto& { return a.max_seqs; },
       "Most sequences decoding at once")
      .Min(1);
  s.Value(
       "max_queue", [](A & a) -> auto& { return a.max_queue; },
       "Most requests waiting for admission beyond free sequence slots (then "
       "429)")
      .Min(0);
  s.Value(
       "ctx", [](A & a) -> auto& { return a.ctx; },
       "Longest sequence (prompt + max_tokens) a request may ask for")
      .Min(1);
  AddCacheOptions(s);
  s.Value(
      "mode", [](A & a) -> auto& { return a.mode; },
      "Decode engine: auto (the checkpoint's factored engine; expanded for "
      "dense K/V), or a mode `lrkv verify` lists");
  s.Value(
       "chat_template", [](A & a) -> auto& { return a.chat_template_file; },
       "Jinja chat template file (default: the checkpoint tokenizer's)")
      .Path();
}

template <typename A>
void AddHttpOptions(OptionSchema<A>& s) {
  s.Bytes(
      "max_body", [](A & a) -> auto& { return a.max_body; },
      "Largest request body, however framed (413 beyond; 1MiB, 64KB)", "1MiB");
  s.Bytes(
      "max_header", [](A & a) -> auto& { return a.max_header; },
      "Largest request line and header section together (431 beyond)", "16KiB");
  s.Value(
       "max_headers", [](A & a) -> auto& { return a.max_headers; },
       "Most header fields in a request (431 beyond)")
      .Min(1);
  s.Value(
       "request_timeout", [](A & a) -> auto& { return a.request_timeout; },
       "Seconds a request may take to arrive whole from its first byte (408 "
       "beyond)")
      .Above(0, 1e9);
  s.Value(
       "idle_timeout", [](A & a) -> auto& { return a.idle_timeout; },
       "Seconds a kept-alive connection may wait for its next request")
      .Above(0, 1e9);
  s.Value(
       "write_timeout", [](A & a) -> auto& { return a.write_timeout; },
       "Seconds a client may leave a response write untaken before its "
       "connection is dropped")
      .Above(0, 1e9);
  s.Value(
       "max_connections", [](A & a) -> auto& { return a.max_connections; },
       "Connections open at once (503 and closed beyond)")
      .Min(1);
  s.Value(
       "shutdown_timeout", [](A & a) -> auto& { return a.shutdown_timeout; },
       "On SIGTERM, seconds the running sequences may go on before they are "
       "ended (finish_reason \"shutdown\")")
      .Min(0);
}

const OptionSchema<ServeArgs>& ServeSchema() {
  static const OptionSchema<ServeArgs> schema = [] {
    OptionSchema<ServeArgs> s("serve");
    AddListenOptions(s);
    AddBatcherOptions(s);
    AddHttpOptions(s);
    return s;
  }();
  return schema;
}

}  // namespace

void AddServeCommands(CLI::App& app, int* exit_code) {
  auto* bench = app.get_subcommand("bench")->add_subcommand(
      "serve",
      "Streaming clients against lrkv serve in-process: sequences admitted at "
      "the same KV memory, batching throughput and latency, a soak "
      "(docs/serving.md)");
  AddSchemaCommand(bench, ServeBenchSchema(), exit_code, RunServeBench);
  auto* cmd = app.add_subcommand("serve",
                                 "OpenAI-compatible HTTP server with "
                                 "continuous batching (docs/serving.md)");
  AddSchemaCommand(cmd, ServeSchema(), exit_code, RunServe);
}

}  // namespace lrkv::cli
