#include "serve/openai_server.h"

#include <chrono>
#include <ctime>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/constant_time.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/transformer.h"
#include "serve/completion_endpoints.h"
#include "serve/http_errors.h"
#include "serve/metrics.h"

namespace lrkv {

namespace {

// The route a path is counted under in /metrics (a label per model id or per
// garbage path would grow without end).
std::string RouteOf(const std::string& path) {
  static const char* const kRoutes[] = {"/health", "/metrics", "/v1/models",
                                        "/v1/completions",
                                        "/v1/chat/completions"};
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  return absl::StartsWith(path, "/v1/models/") ? "/v1/models/{id}" : "other";
}

}  // namespace

absl::Status ServeOptions::Validate() const {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the port must be in [0, 65535], got ", port));
  }
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        "HTTPS needs both a certificate and a key");
  }
  if (model_id.empty())
    return absl::InvalidArgumentError("the model id must not be empty");
  if (shutdown_timeout.count() < 0)
    return absl::InvalidArgumentError("the shutdown timeout must be >= 0");
  RETURN_IF_ERROR(http.Validate());
  return batcher.Validate();
}

OpenAiServer::OpenAiServer(const LanguageModel& model, ServeOptions options)
    : model_(model),
      options_(std::move(options)),
      metrics_(std::make_unique<ServerMetrics>()) {}

OpenAiServer::~OpenAiServer() {
  // Handlers return (their clients gone) before the batcher they wait on goes.
  http_.reset();
  endpoints_.reset();
  batcher_.reset();
}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Create(
    const LanguageModel& model, ServeOptions options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(model, std::move(options)));
  const ServeOptions& o = s->options_;
  if (!o.chat_template.empty()) {
    const Tokenizer& tok = model.tokenizer();
    const auto& sp = tok.specials();
    ASSIGN_OR_RETURN(
        ChatTemplate t,
        ChatTemplate::Parse(o.chat_template,
                            sp.bos_id >= 0 ? tok.TokenToPiece(sp.bos_id) : "",
                            sp.eos_id >= 0 ? tok.TokenToPiece(sp.eos_id) : ""));
    s->template_ = std::move(t);
  }
  BatcherOptions batcher = o.batcher;
  ServerMetrics* metrics = s->metrics_.get();
  batcher.on_step = [metrics](const BatcherOptions::StepReport& r) {
    metrics->ObserveStep(r);
  };
  batcher.bf16_products = model.products() == "bf16";
  ASSIGN_OR_RETURN(s->batcher_,
                   ContinuousBatcher::Create(model.transformer(), batcher));
  s->endpoints_ = std::make_unique<CompletionEndpoints>(
      model.tokenizer(), *s->batcher_, s->template_ ? &*s->template_ : nullptr,
      o.model_id);
  HttpServerOptions http;
  http.host = o.host;
  http.port = o.port;
  http.tls_cert = o.tls_cert;
  http.tls_key = o.tls_key;
  http.limits = o.http;
  // A streamed response holds its worker: enough for every running and queued
  // sequence, and a few for /health and /metrics.
  http.workers = o.batcher.max_seqs + o.batcher.max_queue + 8;
  http.error_body = [](int status, const std::string& message) {
    return OpenAiErrorBody(status, message);
  };
  http.error_content_type = "application/json";
  http.on_refusal = [metrics](int status) {
    metrics->CountRequest("other", status);
  };
  OpenAiServer* self = s.get();
  ASSIGN_OR_RETURN(
      s->http_, HttpServer::Create(std::move(http), [self](HttpExchange& ex) {
        const int status = self->Handle(ex);
        if (status != 0) {
          self->metrics_->CountRequest(RouteOf(ex.request().path), status);
        }
      }));
  return s;
}

int OpenAiServer::Handle(HttpExchange& ex) {
  const HttpRequest& req = ex.request();
  if (!options_.api_key.empty() && absl::StartsWith(req.path, "/v1/") &&
      !ConstantTimeEquals(req.Header("Authorization"),
                          absl::StrCat("Bearer ", options_.api_key))) {
    return RespondError(
        ex, absl::UnauthenticatedError("Incorrect API key provided."));
  }
  const bool get = req.method == "GET", post = req.method == "POST";
  if (req.path == "/health" && get) {
    return RespondJson(ex, 200, R"({"status":"ok"})");
  }
  if (req.path == "/metrics" && get) {
    ex.Respond({200, "text/plain; version=0.0.4", {}},
               metrics_->Render(batcher_->Stats(), http_->Stats()));
    return 200;
  }
  const nlohmann::json model = {
      {"id", options_.model_id},
      {"object", "model"},
      {"created", static_cast<int64_t>(std::time(nullptr))},
      {"owned_by", "lrkv"}};
  if (req.path == "/v1/models" && get) {
    return RespondJson(
        ex, 200, nlohmann::json{{"object", "list"}, {"data", {model}}}.dump());
  }
  if (absl::StartsWith(req.path, "/v1/models/") && get) {
    const std::string id = req.path.substr(std::string("/v1/models/").size());
    if (id != options_.model_id) {
      return RespondError(ex, absl::NotFoundError(absl::StrCat(
                                  "The model '", id, "' does not exist")));
    }
    return RespondJson(
        ex, 200,
        model.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (req.path == "/v1/completions" && post) return endpoints_->Completions(ex);
  if (req.path == "/v1/chat/completions" && post)
    return endpoints_->ChatCompletions(ex);
  const bool known = RouteOf(req.path) != "other";
  const int status = known ? 405 : 404;
  ex.Respond(
      {status, "application/json", {}},
      OpenAiErrorBody(
          status,
          known ? absl::StrCat(req.method, " is not allowed on ", req.path)
                : absl::StrCat("no route ", req.method, " ", req.path)));
  return status;
}

absl::StatusOr<int> OpenAiServer::Bind() { return http_->Bind(); }

void OpenAiServer::Run() { http_->Run(); }

void OpenAiServer::Stop() {
  if (http_) http_->Stop();
}

void OpenAiServer::Shutdown() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + options_.shutdown_timeout;
  http_->BeginShutdown();
  batcher_->Drain(deadline);
  // The sequences end by the deadline (at the next step past it); their last
  // chunks and 503s are written within a second after it, or abandoned.
  const auto flushed = deadline + std::chrono::seconds(1);
  while (Clock::now() < flushed &&
         (!batcher_->Idle() || http_->ActiveExchanges() > 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http_->Stop();
}

}  // namespace lrkv
