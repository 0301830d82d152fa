// `lrkv serve`: an OpenAI-compatible HTTP server (serve/http/: Boost.Beast,
// HTTPS with a certificate and key, the limits of http_server.h) over one
// loaded checkpoint, decoding every request in one continuous batch
// (runtime/continuous_batcher.h). Routes:
//   GET  /health, /metrics (Prometheus text), /v1/models, /v1/models/{id}
//   POST /v1/completions, /v1/chat/completions
// With an API key, every /v1/ route needs `Authorization: Bearer KEY` (401
// otherwise; compared in constant time).
#ifndef LRKV_SERVE_OPENAI_SERVER_H_
#define LRKV_SERVE_OPENAI_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/continuous_batcher.h"
#include "runtime/language_model.h"
#include "serve/http/http_server.h"
#include "tokenizer/chat_template.h"

namespace lrkv {

class CompletionEndpoints;
class ServerMetrics;

struct ServeOptions {
  /// Address to listen on.
  std::string host = "127.0.0.1";
  /// Port to listen on; 0 takes any free one (Bind returns it).
  int port = 8080;
  /// PEM certificate and private key: HTTPS instead of HTTP (both or neither).
  std::string tls_cert;
  std::string tls_key;
  /// The token every /v1/ request must carry as `Authorization: Bearer`; empty:
  /// none.
  std::string api_key;
  /// The model's id in /v1/models, which requests must name.
  std::string model_id = "lrkv";
  /// What a client may make the server hold (header and body sizes, timeouts,
  /// connections).
  HttpLimits http;
  /// On Shutdown, how long the running sequences may go on before they are
  /// ended.
  std::chrono::milliseconds shutdown_timeout{5000};
  /// The chat template's source; empty: the checkpoint has none (chat is
  /// refused).
  std::string chat_template;
  BatcherOptions batcher;

  absl::Status Validate() const;
};

class OpenAiServer {
 public:
  // `model` must outlive the server. Refuses a chat template outside the
  // supported subset (naming the construct) and a certificate that does not
  // load.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Create(
      const LanguageModel& model, ServeOptions options);
  ~OpenAiServer();

  // Binds the address; returns the port (ServeOptions::port, or the one taken
  // for 0).
  absl::StatusOr<int> Bind();
  // Answers requests until Stop or Shutdown (blocks).
  void Run();
  // Stops at once: every connection closed, every sequence cancelled.
  void Stop();
  // Stops gracefully (SIGTERM): no connection or request is taken from now
  // (503), the queued requests are answered 503 (a stream: a last chunk with
  // finish_reason "shutdown" and [DONE]), the running sequences go on for
  // ServeOptions::shutdown_timeout and are then ended the same way; returns
  // once every response is out (at most a second past that) and Run returns.
  void Shutdown();

  const ContinuousBatcher& batcher() const { return *batcher_; }
  const ServerMetrics& metrics() const { return *metrics_; }
  HttpServerStats http_stats() const { return http_->Stats(); }

 private:
  OpenAiServer(const LanguageModel& model, ServeOptions options);
  // Answers one request; returns the status answered (0: the client left).
  int Handle(HttpExchange& ex);

  const LanguageModel& model_;
  ServeOptions options_;
  std::optional<ChatTemplate> template_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ContinuousBatcher> batcher_;
  std::unique_ptr<CompletionEndpoints> endpoints_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace lrkv

#endif  // LRKV_SERVE_OPENAI_SERVER_H_
