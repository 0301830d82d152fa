#include "serve/openai_server.h"

#include <httplib.h>

#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/transformer.h"
#include "serve/completion_endpoints.h"
#include "serve/http_errors.h"
#include "serve/metrics.h"

namespace lrkv {

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
  return batcher.Validate();
}

OpenAiServer::OpenAiServer(const LanguageModel& model, ServeOptions options)
    : model_(model),
      options_(std::move(options)),
      metrics_(std::make_unique<ServerMetrics>()) {}

OpenAiServer::~OpenAiServer() {
  Stop();
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
  if (!o.tls_cert.empty()) {
    auto https = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(),
                                                      o.tls_key.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the certificate ", o.tls_cert, " or key ", o.tls_key,
                       " does not load"));
    }
    s->http_ = std::move(https);
  } else {
    s->http_ = std::make_unique<httplib::Server>();
  }
  s->Route();
  return s;
}

void OpenAiServer::Route() {
  httplib::Server& h = *http_;
  // A streaming response holds its worker thread: enough for every running and
  // queued sequence, and a few for /health and /metrics.
  const auto threads = static_cast<size_t>(options_.batcher.max_seqs +
                                           options_.batcher.max_queue + 8);
  h.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  h.set_payload_max_length(options_.max_body_bytes);
  h.set_pre_routing_handler([this](const httplib::Request& req,
                                   httplib::Response& res) {
    if (options_.api_key.empty() || !absl::StartsWith(req.path, "/v1/")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (req.get_header_value("Authorization") ==
        absl::StrCat("Bearer ", options_.api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    SetError(res, absl::UnauthenticatedError("Incorrect API key provided."));
    return httplib::Server::HandlerResponse::Handled;
  });
  h.set_logger([this](const httplib::Request& req,
                      const httplib::Response& res) {
    // The routes by name (a path per model id or garbage would grow the labels
    // without end).
    static const char* const kRoutes[] = {"/health", "/metrics", "/v1/models",
                                          "/v1/completions",
                                          "/v1/chat/completions"};
    std::string route =
        absl::StartsWith(req.path, "/v1/models/") ? "/v1/models/{id}" : "other";
    for (const char* r : kRoutes) {
      if (req.path == r) route = r;
    }
    metrics_->CountRequest(route, res.status);
  });
  h.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what =
        res.status == 413 ? "the request body is too large"
        : res.status == 404
            ? absl::StrCat("no route ", req.method, " ", req.path)
            : absl::StrCat("HTTP ", res.status);
    res.set_content(OpenAiErrorBody(res.status, what), "application/json");
  });
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        SetError(res, absl::InternalError("the server failed on this request"));
      });
  h.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Render(batcher_->Stats()),
                    "text/plain; version=0.0.4");
  });
  const nlohmann::json model = {
      {"id", options_.model_id},
      {"object", "model"},
      {"created", static_cast<int64_t>(std::time(nullptr))},
      {"owned_by", "lrkv"}};
  h.Get("/v1/models", [model](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        nlohmann::json{{"object", "list"}, {"data", {model}}}.dump(),
        "application/json");
  });
  h.Get("/v1/models/(.+)", [this, model](const httplib::Request& req,
                                         httplib::Response& res) {
    if (req.matches[1] != options_.model_id) {
      return SetError(
          res, absl::NotFoundError(absl::StrCat(
                   "The model '", req.matches[1].str(), "' does not exist")));
    }
    res.set_content(model.dump(), "application/json");
  });
  h.Post("/v1/completions",
         [this](const httplib::Request& req, httplib::Response& res) {
           endpoints_->Completions(req, res);
         });
  h.Post("/v1/chat/completions",
         [this](const httplib::Request& req, httplib::Response& res) {
           endpoints_->ChatCompletions(req, res);
         });
}

absl::StatusOr<int> OpenAiServer::Bind() {
  if (options_.port == 0) {
    const int port = http_->bind_to_any_port(options_.host);
    if (port < 0)
      return absl::UnavailableError(
          absl::StrCat("cannot bind ", options_.host));
    return port;
  }
  if (!http_->bind_to_port(options_.host, options_.port)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot bind ", options_.host, ":", options_.port, " (in use?)"));
  }
  return options_.port;
}

void OpenAiServer::Run() { http_->listen_after_bind(); }

void OpenAiServer::Stop() {
  if (http_) http_->stop();
}

}  // namespace lrkv
