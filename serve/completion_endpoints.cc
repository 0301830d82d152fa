#include "serve/completion_endpoints.h"

#include <chrono>
#include <ctime>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "serve/http_errors.h"
#include "tokenizer/chat_template.h"

namespace lrkv {
namespace {

using nlohmann::json;

// How long one wait for a choice's next tokens lasts before the connection is
// checked.
constexpr auto kPoll = std::chrono::milliseconds(500);
// A stream that sent nothing for this long sends an SSE comment (so do
// proxies' idle timers; a client gone is also found by the failed write).
constexpr auto kKeepAlive = std::chrono::seconds(2);
constexpr char kKeepAliveComment[] = ": keep-alive\n\n";

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json Usage(const std::vector<std::unique_ptr<Choice>>& choices) {
  int64_t prompt = 0, completion = 0;
  for (const auto& c : choices) {
    prompt += c->prompt_tokens();
    completion += c->completion_tokens();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

// The completions API's logprobs object: parallel lists, one entry per token.
struct CompletionLogprobs {
  json tokens = json::array(), token_logprobs = json::array(),
       top_logprobs = json::array(), text_offset = json::array();
  size_t offset = 0;

  // `scored` false: a token with no log-probability (the prompt's first).
  void Add(const TokenLogprob& t, bool scored = true) {
    tokens.push_back(t.token);
    token_logprobs.push_back(scored ? json(t.logprob) : json(nullptr));
    json top = json::object();
    for (const auto& [token, logprob] : t.top) top[token] = logprob;
    top_logprobs.push_back(scored ? top : json(nullptr));
    text_offset.push_back(offset);
    offset += t.token.size();
  }
  json ToJson() const {
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top_logprobs},
            {"text_offset", text_offset}};
  }
};

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}

// The chat API's logprobs object.
json ChatLogprobs(const std::vector<TokenLogprob>& tokens) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    json top = json::array();
    for (const auto& [token, logprob] : t.top) {
      top.push_back(
          {{"token", token}, {"logprob", logprob}, {"bytes", Bytes(token)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", Bytes(t.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json FinishOf(const ChoiceDelta& d) {
  return d.finish_reason.empty() ? json(nullptr) : json(d.finish_reason);
}

// Cancels every choice's sequence when the client leaves (on the server's I/O
// thread, at once: a queued one frees its slot, a running one ends at the next
// step).
void CancelWhenGone(HttpExchange& ex,
                    const std::vector<std::unique_ptr<Choice>>& choices) {
  std::vector<std::shared_ptr<Sequence>> sequences;
  for (const auto& c : choices) sequences.push_back(c->sequence());
  ex.OnClientGone([sequences] {
    for (const auto& s : sequences) s->Cancel();
  });
}

// A stream in progress: its choices, polled in turn; `chunk` turns a choice's
// delta into the chunk's choice object (null: nothing to send).
struct StreamState {
  std::vector<std::unique_ptr<Choice>> choices;
  std::function<json(size_t, const ChoiceDelta&)> chunk;
  json head;  // id, object, created, model
  bool include_usage = false;
  size_t next = 0;
  std::chrono::steady_clock::time_point last_write =
      std::chrono::steady_clock::now();
};

bool WriteEvent(HttpExchange& ex, const std::string& data) {
  return ex.Write(absl::StrCat("data: ", data, "\n\n"));
}

bool EndStream(HttpExchange& ex) {
  if (!WriteEvent(ex, "[DONE]")) return false;
  ex.EndStream();
  return false;
}

// One round of the stream: false when it is over (ended, or the client gone).
bool PumpStream(StreamState& s, HttpExchange& ex) {
  size_t i = 0;
  while (i < s.choices.size() &&
         s.choices[(s.next + i) % s.choices.size()]->finished())
    ++i;
  if (i == s.choices.size()) {
    if (s.include_usage) {
      json usage = s.head;
      usage["choices"] = json::array();
      usage["usage"] = Usage(s.choices);
      if (!WriteEvent(ex, Dump(usage))) return false;
    }
    return EndStream(ex);
  }
  const size_t index = (s.next + i) % s.choices.size();
  s.next = index + 1;
  const auto wait =
      s.choices.size() > 1 ? std::chrono::milliseconds(20) : kPoll;
  const ChoiceDelta d = s.choices[index]->Poll(wait);
  if (ex.client_gone()) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!d.error.ok()) {
    WriteEvent(ex, OpenAiErrorBody(d.error));
    return EndStream(ex);
  }
  json choice = s.chunk(index, d);
  if (!choice.is_null()) {
    json chunk = s.head;
    chunk["choices"] = json::array({choice});
    s.last_write = now;
    return WriteEvent(ex, Dump(chunk));
  }
  if (now - s.last_write > kKeepAlive) {
    s.last_write = now;
    return ex.Write(kKeepAliveComment);
  }
  return true;
}

// Streams the choices as server-sent events until they end or the client
// leaves (the choices go with the state: a sequence still running is
// cancelled).
int Stream(HttpExchange& ex, StreamState state) {
  CancelWhenGone(ex, state.choices);
  ex.BeginStream({200, "text/event-stream", {{"Cache-Control", "no-cache"}}},
                 kKeepAliveComment);
  while (PumpStream(state, ex)) {
  }
  return 200;
}

// Waits for every choice to end, handing each delta to `take`. Cancelled (and
// nothing answered) when the client left; Unavailable when the server ended a
// choice while shutting down; a choice's own error.
absl::Status Collect(
    HttpExchange& ex, const std::vector<std::unique_ptr<Choice>>& choices,
    const std::function<void(size_t, const ChoiceDelta&)>& take) {
  CancelWhenGone(ex, choices);
  for (size_t i = 0; i < choices.size(); ++i) {
    Choice& c = *choices[i];
    while (!c.finished()) {
      const ChoiceDelta d = c.Poll(kPoll);
      if (ex.client_gone()) return absl::CancelledError("the client left");
      if (!d.error.ok()) return d.error;
      if (d.finish_reason == FinishReasonName(FinishReason::kShutdown)) {
        return absl::UnavailableError(
            "the server shut down before this completion was finished; try "
            "again");
      }
      take(i, d);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RespondJson(HttpExchange& ex, int http_status, std::string body) {
  ex.Respond({http_status, "application/json", {}}, std::move(body));
  return http_status;
}

int RespondError(HttpExchange& ex, const absl::Status& status) {
  HttpResponseHead head{HttpStatusOf(status), "application/json", {}};
  if (head.status == 429 || head.status == 503)
    head.headers.emplace_back("Retry-After", "1");
  ex.Respond(std::move(head), OpenAiErrorBody(status));
  return HttpStatusOf(status);
}

nlohmann::json CompletionEndpoints::Head(const char* id_prefix,
                                         const char* object) {
  return {
      {"id", absl::StrFormat("%s-%016x", id_prefix, next_id_.fetch_add(1) + 1)},
      {"object", object},
      {"created", static_cast<int64_t>(std::time(nullptr))},
      {"model", model_id_}};
}

std::vector<int32_t> CompletionEndpoints::PromptIds(
    const CompletionPrompt& prompt) const {
  if (prompt.is_ids) return prompt.ids;
  std::vector<int32_t> ids = {tokenizer_.document_start_id()};
  for (int32_t id : tokenizer_.Encode(prompt.text)) ids.push_back(id);
  return ids;
}

absl::StatusOr<std::vector<std::unique_ptr<Choice>>>
CompletionEndpoints::Submit(const std::vector<std::vector<int32_t>>& prompts,
                            const GenerationParams& params,
                            bool prompt_logprobs) {
  if (params.model != model_id_) {
    return absl::NotFoundError(
        absl::StrCat("The model '", params.model,
                     "' does not exist; this server serves '", model_id_, "'"));
  }
  const int64_t context = batcher_.options().context;
  std::vector<std::unique_ptr<Choice>> choices;
  for (const std::vector<int32_t>& ids : prompts) {
    SequenceRequest r;
    r.prompt = ids;
    const auto n = static_cast<int64_t>(ids.size());
    r.max_tokens = params.max_tokens >= 0 ? params.max_tokens : context - n;
    if (r.max_tokens < 0 || n + r.max_tokens > context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "This model's maximum context length is ", context,
          " tokens. However, you requested ", n + r.max_tokens, " tokens (", n,
          " in the prompt, ", r.max_tokens, " for the completion)."));
    }
    r.sampling = params.sampling;
    r.stop_at_eos = !params.ignore_eos;
    r.top_logprobs = params.logprobs ? params.top_logprobs : 0;
    r.prompt_logprobs = prompt_logprobs;
    ASSIGN_OR_RETURN(std::shared_ptr<Sequence> seq,
                     batcher_.Submit(std::move(r)));
    choices.push_back(
        std::make_unique<Choice>(tokenizer_, std::move(seq), params.stop, n));
  }
  return choices;
}

int CompletionEndpoints::Completions(HttpExchange& ex) {
  auto request = ParseCompletionRequest(ex.request().body);
  if (!request.ok()) return RespondError(ex, request.status());
  const CompletionRequest& r = *request;
  std::vector<std::vector<int32_t>> prompts;
  for (const CompletionPrompt& p : r.prompts) prompts.push_back(PromptIds(p));
  const bool score = r.echo && r.params.logprobs;
  auto choices = Submit(prompts, r.params, score);
  if (!choices.ok()) return RespondError(ex, choices.status());
  // The text and logprobs a choice starts with: its prompt, when echoed.
  auto echo_text = [&](size_t i) {
    return r.prompts[i].is_ids ? tokenizer_.Decode(r.prompts[i].ids)
                               : r.prompts[i].text;
  };
  auto first_token = [&](size_t i) {
    return TokenLogprob{tokenizer_.TokenToPiece(prompts[i][0]), 0, {}};
  };
  const json head = Head("cmpl", "text_completion");
  if (r.params.stream) {
    StreamState state;
    state.choices = std::move(*choices);
    state.head = head;
    state.include_usage = r.params.include_usage;
    auto echoed = std::make_shared<std::vector<bool>>(prompts.size(), !r.echo);
    state.chunk = [=, logprobs = r.params.logprobs](
                      size_t i, const ChoiceDelta& d) -> json {
      std::string text;
      CompletionLogprobs lp;
      if (!(*echoed)[i]) {
        (*echoed)[i] = true;
        text = echo_text(i);
        if (score) lp.Add(first_token(i), false);
      }
      for (const TokenLogprob& t : d.prompt_logprobs) lp.Add(t);
      text += d.text;
      for (const TokenLogprob& t : d.logprobs) lp.Add(t);
      if (text.empty() && d.finish_reason.empty() && lp.tokens.empty())
        return nullptr;
      return {{"index", i},
              {"text", text},
              {"logprobs", logprobs ? lp.ToJson() : json(nullptr)},
              {"finish_reason", FinishOf(d)}};
    };
    return Stream(ex, std::move(state));
  }
  std::vector<std::string> texts(choices->size());
  std::vector<CompletionLogprobs> lps(choices->size());
  std::vector<json> finish(choices->size());
  for (size_t i = 0; i < choices->size(); ++i) {
    if (r.echo) texts[i] = echo_text(i);
    if (score) lps[i].Add(first_token(i), false);
  }
  const absl::Status collected =
      Collect(ex, *choices, [&](size_t i, const ChoiceDelta& d) {
        for (const TokenLogprob& t : d.prompt_logprobs) lps[i].Add(t);
        texts[i] += d.text;
        for (const TokenLogprob& t : d.logprobs) lps[i].Add(t);
        finish[i] = FinishOf(d);
      });
  if (ex.client_gone()) return 0;
  if (!collected.ok()) return RespondError(ex, collected);
  json out = head;
  out["choices"] = json::array();
  for (size_t i = 0; i < choices->size(); ++i) {
    out["choices"].push_back(
        {{"index", i},
         {"text", texts[i]},
         {"logprobs", r.params.logprobs ? lps[i].ToJson() : json(nullptr)},
         {"finish_reason", finish[i]}});
  }
  out["usage"] = Usage(*choices);
  return RespondJson(ex, 200, Dump(out));
}

int CompletionEndpoints::ChatCompletions(HttpExchange& ex) {
  auto request = ParseChatRequest(ex.request().body);
  if (!request.ok()) return RespondError(ex, request.status());
  const ChatRequest& r = *request;
  if (template_ == nullptr) {
    return RespondError(
        ex, absl::FailedPreconditionError(
                "this checkpoint has no chat template; use /v1/completions"));
  }
  auto text = template_->Render(r.messages, /*add_generation_prompt=*/true);
  if (!text.ok())
    return RespondError(ex,
                        absl::InvalidArgumentError(text.status().message()));
  auto choices = Submit({tokenizer_.Encode(*text)}, r.params, false);
  if (!choices.ok()) return RespondError(ex, choices.status());
  const json head = Head("chatcmpl", r.params.stream ? "chat.completion.chunk"
                                                     : "chat.completion");
  if (r.params.stream) {
    StreamState state;
    state.choices = std::move(*choices);
    state.head = head;
    state.include_usage = r.params.include_usage;
    auto started = std::make_shared<bool>(false);
    state.chunk = [started, logprobs = r.params.logprobs](
                      size_t i, const ChoiceDelta& d) -> json {
      json delta = json::object();
      if (!*started) {
        *started = true;
        delta["role"] = "assistant";
      }
      if (!d.text.empty()) delta["content"] = d.text;
      if (delta.empty() && d.finish_reason.empty()) return nullptr;
      return {{"index", i},
              {"delta", delta},
              {"logprobs", logprobs && !d.logprobs.empty()
                               ? ChatLogprobs(d.logprobs)
                               : json(nullptr)},
              {"finish_reason", FinishOf(d)}};
    };
    return Stream(ex, std::move(state));
  }
  std::string content;
  std::vector<TokenLogprob> logprobs;
  json finish;
  const absl::Status collected =
      Collect(ex, *choices, [&](size_t, const ChoiceDelta& d) {
        content += d.text;
        logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        finish = FinishOf(d);
      });
  if (ex.client_gone()) return 0;
  if (!collected.ok()) return RespondError(ex, collected);
  json out = head;
  out["choices"] =
      json::array({{{"index", 0},
                    {"message", {{"role", "assistant"}, {"content", content}}},
                    {"logprobs", r.params.logprobs ? ChatLogprobs(logprobs)
                                                   : json(nullptr)},
                    {"finish_reason", finish}}});
  out["usage"] = Usage(*choices);
  return RespondJson(ex, 200, Dump(out));
}

}  // namespace lrkv
