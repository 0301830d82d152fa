#include "serve/serve_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "runtime/language_model.h"
#include "serve/http/http_client.h"
#include "serve/metrics.h"
#include "serve/openai_server.h"

namespace lrkv {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

LatencySummary Summarize(std::vector<double> ms) {
  LatencySummary s;
  s.samples = static_cast<int64_t>(ms.size());
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  s.p50_ms = at(0.5);
  s.p99_ms = at(0.99);
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / ms.size();
  return s;
}

// One streamed request as a client sees it.
struct StreamResult {
  int status = 0;  // HTTP status; 0: the connection failed (or we dropped it)
  bool abandoned = false;
  double ttft_ms = -1;            // to the first event with text
  std::vector<double> gaps_ms;    // between events with text
  int64_t completion_tokens = 0;  // from the usage chunk
};

// Streams a completion of `prompt` ids; drops the connection after
// `abandon_after` text events (< 0: never) or once `stop` is set.
StreamResult Stream(int port, const std::vector<int32_t>& prompt,
                    int64_t max_tokens, int abandon_after,
                    const std::atomic<bool>* stop) {
  StreamResult r;
  HttpClientRequest req;
  req.method = "POST";
  req.target = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = json{{"model", "bench"},
                  {"prompt", prompt},
                  {"max_tokens", max_tokens},
                  {"temperature", 0},
                  {"ignore_eos", true},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}}}
                 .dump();
  const auto t0 = Clock::now();
  auto last = t0;
  std::string buffer;
  int events = 0;
  auto on_body = [&](std::string_view data) {
    buffer.append(data);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;
         buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event.rfind("data: {", 0) != 0) continue;
      const json j = json::parse(event.substr(6), nullptr, false);
      if (j.contains("usage"))
        r.completion_tokens = j["usage"].value("completion_tokens", 0);
      if (!j.contains("choices") || j["choices"].empty()) continue;
      if (j["choices"][0].value("text", "").empty()) continue;
      const auto now = Clock::now();
      if (r.ttft_ms < 0) {
        r.ttft_ms = Seconds(t0, now) * 1e3;
      } else {
        r.gaps_ms.push_back(Seconds(last, now) * 1e3);
      }
      last = now;
      ++events;
    }
    return !((abandon_after >= 0 && events >= abandon_after) ||
             (stop != nullptr && *stop));
  };
  auto res =
      HttpFetch("127.0.0.1", port, req, std::chrono::seconds(600), on_body);
  r.abandoned = res.ok() && res->abandoned;
  r.status =
      res.ok() && !r.abandoned ? res->status : 0;  // 0: dropped, or no answer
  return r;
}

// The prompt ids of a bench request: the document start token, then text ids.
std::vector<int32_t> PromptIds(const Tokenizer& tok, int64_t n, uint64_t salt) {
  static const char kText[] =
      "Once upon a time, there was a little girl named Lily. She loved to play "
      "outside in "
      "the sunshine. One day, she saw a big, red ball in the park and ran to "
      "get it. ";
  std::vector<int32_t> text = tok.Encode(kText);
  std::vector<int32_t> ids = {tok.document_start_id()};
  for (int64_t i = 0; static_cast<int64_t>(ids.size()) < n; ++i) {
    ids.push_back(text[(i + salt) % text.size()]);
  }
  return ids;
}

struct Served {
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<OpenAiServer> server;
  std::thread thread;
  int port = 0;
  ~Served() {
    if (server) server->Stop();
    if (thread.joinable()) thread.join();
  }
};

absl::StatusOr<std::unique_ptr<Served>> Serve(const std::string& checkpoint,
                                              const ServeBenchOptions& o) {
  auto s = std::make_unique<Served>();
  LanguageModelOptions mo;
  mo.bf16_activations = o.bf16_products;
  ASSIGN_OR_RETURN(s->model, LanguageModel::Load(checkpoint, mo));
  ServeOptions so;
  so.port = 0;
  so.model_id = "bench";
  so.batcher = o.batcher;
  // Every client waits rather than being refused.
  so.batcher.max_queue = std::max<int64_t>(so.batcher.max_queue,
                                           2 * so.batcher.max_seqs + o.clients);
  ASSIGN_OR_RETURN(s->server, OpenAiServer::Create(*s->model, so));
  ASSIGN_OR_RETURN(s->port, s->server->Bind());
  s->thread = std::thread([p = s->server.get()] { p->Run(); });
  return s;
}

// --max-seqs clients each ask for a whole --ctx sequence; the most running at
// once.
int64_t MeasureAdmission(Served& s, const ServeBenchOptions& o) {
  const int64_t n = o.batcher.max_seqs;
  const int64_t prompt = std::min<int64_t>(16, o.batcher.context / 2);
  std::atomic<bool> stop{false};
  // Counted before any client starts: a small model's requests can be
  // submitted before this thread reads the count, which then waited out the
  // time limit below for requests it had missed.
  const ContinuousBatcher& b = s.server->batcher();
  const int64_t before = b.Stats().submitted;
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int64_t i = 0; i < n; ++i) {
    clients.emplace_back([&, i] {
      Stream(s.port, PromptIds(s.model->tokenizer(), prompt, i),
             o.batcher.context - prompt, -1, &stop);
    });
  }
  // Every request in; then the next steps admit all that fit (each decodes
  // until told to stop, so none leaves before the count).
  while (b.Stats().submitted - before < n && Seconds(t0, Clock::now()) < 120) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Then until what fits is admitted (every request asks for the same cache) or
  // the queue is empty; a batcher that admitted fewer is seen here, at the time
  // limit.
  const int64_t expected = std::min(
      n, std::min(o.batcher.max_seqs, b.SequencesThatFit(o.batcher.context)));
  while (Seconds(t0, Clock::now()) < 240) {
    const BatcherStats st = b.Stats();
    if (st.running >= expected || st.queued == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t admitted = b.Stats().peak_running;
  stop = true;
  for (auto& c : clients) c.join();
  while (b.Stats().running > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return admitted;
}

BatchingRun MeasureBatching(Served& s, const ServeBenchOptions& o,
                            int64_t streams) {
  std::vector<std::vector<StreamResult>> results(streams);
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < streams; ++c) {
    clients.emplace_back([&, c] {
      for (int64_t k = 0; k < o.requests; ++k) {
        results[c].push_back(Stream(
            s.port, PromptIds(s.model->tokenizer(), o.prompt_tokens, c + 7 * k),
            o.max_tokens, -1, nullptr));
      }
    });
  }
  for (auto& c : clients) c.join();
  BatchingRun run;
  run.streams = streams;
  run.seconds = Seconds(t0, Clock::now());
  std::vector<double> ttft, itl;
  for (const auto& per_client : results) {
    for (const StreamResult& r : per_client) {
      run.completion_tokens += r.completion_tokens;
      if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
      itl.insert(itl.end(), r.gaps_ms.begin(), r.gaps_ms.end());
    }
  }
  run.decode_tokens_per_second = run.completion_tokens / run.seconds;
  run.ttft = Summarize(ttft);
  run.itl = Summarize(itl);
  run.mean_decode_step_ms =
      s.server->metrics().MeanDecodeStepSeconds(streams) * 1e3;
  return run;
}

SoakRun MeasureSoak(Served& s, const ServeBenchOptions& o) {
  SoakRun soak;
  soak.rss_before = ResidentBytes();
  std::atomic<int64_t> requests{0}, completed{0}, abandoned{0}, errors{0},
      refused{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < o.clients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(o.seed * 1000 + c);
      while (Seconds(t0, Clock::now()) < o.soak_seconds) {
        const int64_t prompt =
            4 + rng() % std::max<int64_t>(1, o.prompt_tokens);
        const int64_t tokens = 1 + rng() % std::max<int64_t>(1, o.max_tokens);
        const bool abandon =
            std::uniform_real_distribution<double>(0, 1)(rng) < o.abort_share;
        const int after =
            abandon ? 1 + static_cast<int>(rng() % std::max<int64_t>(1, tokens))
                    : -1;
        const StreamResult r =
            Stream(s.port, PromptIds(s.model->tokenizer(), prompt, rng() % 97),
                   tokens, after, nullptr);
        ++requests;
        if (r.abandoned) {
          ++abandoned;
        } else if (r.status == 200) {
          ++completed;
        } else if (r.status == 429) {
          ++refused;
        } else {
          ++errors;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  const ContinuousBatcher& b = s.server->batcher();
  while (b.Stats().running > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  soak.seconds = Seconds(t0, Clock::now());
  soak.requests = requests;
  soak.completed = completed;
  soak.abandoned = abandoned;
  soak.server_errors = errors;
  soak.refused = refused;
  soak.rss_after = ResidentBytes();
  return soak;
}

// The phases of one model, in order: loading, admission, one stream, the
// concurrent streams, the engines alone, the soak.
std::vector<std::string> PhasesOf(const ServeBenchOptions& o) {
  std::vector<std::string> phases = {"loading", "admission", "1 stream"};
  if (o.clients > 1) {
    phases.push_back(absl::StrCat(o.clients, " streams"));
    if (o.engine_steps > 0) phases.push_back("engines alone");
  }
  if (o.soak_seconds > 0) phases.push_back("soak");
  return phases;
}

absl::StatusOr<ServeBenchModel> MeasureModel(const std::string& label,
                                             const std::string& checkpoint,
                                             const ServeBenchOptions& o,
                                             int64_t model, int64_t models) {
  const std::vector<std::string> phases = PhasesOf(o);
  const auto total = static_cast<int64_t>(phases.size()) * models;
  int64_t step = model * static_cast<int64_t>(phases.size());
  const auto begin = [&](size_t phase) {
    if (o.progress) o.progress(label + ": " + phases[phase], ++step, total);
  };
  begin(0);
  ASSIGN_OR_RETURN(auto s, Serve(checkpoint, o));
  ServeBenchModel m;
  m.label = label;
  m.checkpoint = checkpoint;
  m.layout = KvLayoutName(s->model->config().kv.layout);
  m.engine = DecodeModeName(s->server->batcher().mode());
  m.cache_bytes_per_sequence =
      s->server->batcher().CacheBytes(o.batcher.context);
  m.sequences_that_fit =
      s->server->batcher().SequencesThatFit(o.batcher.context);
  size_t phase = 1;
  begin(phase++);
  m.admitted = MeasureAdmission(*s, o);
  for (int64_t streams : {int64_t{1}, o.clients}) {
    begin(phase++);
    m.batching.push_back(MeasureBatching(*s, o, streams));
    if (o.clients == 1) break;
  }
  if (o.engine_steps > 0 && o.clients >= 2) {
    begin(phase++);
    ASSIGN_OR_RETURN(m.engine_steps,
                     s->server->batcher().TimeEngineSteps(
                         o.clients, o.batcher.context, o.engine_steps));
  }
  if (o.soak_seconds > 0) {
    begin(phase++);
    m.soak = MeasureSoak(*s, o);
  }
  return m;
}

}  // namespace

absl::Status ServeBenchOptions::Validate() const {
  if (clients < 1 || requests < 1 || prompt_tokens < 2 || max_tokens < 1) {
    return absl::InvalidArgumentError(
        "clients, requests and max tokens must be >= 1, prompt tokens >= 2");
  }
  if (prompt_tokens + max_tokens > batcher.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt tokens + max tokens (", prompt_tokens + max_tokens,
                     ") exceed the context of ", batcher.context));
  }
  if (engine_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine steps must be >= 0, got ", engine_steps));
  }
  if (engine_steps > 0) {
    RETURN_IF_ERROR(ContinuousBatcher::CheckEngineSteps(
        std::max<int64_t>(clients, 2), batcher.context, engine_steps));
  }
  if (soak_seconds < 0 || abort_share < 0 || abort_share > 1) {
    return absl::InvalidArgumentError(
        "the soak seconds must be >= 0 and the abort share in [0, 1]");
  }
  return batcher.Validate();
}

absl::StatusOr<ServeBenchReport> RunServeBench(const ServeBenchOptions& o) {
  RETURN_IF_ERROR(o.Validate());
  ServeBenchReport report;
  report.options = o;
  const int64_t models = o.source.empty() ? 1 : 2;
  ASSIGN_OR_RETURN(ServeBenchModel converted,
                   MeasureModel("converted", o.checkpoint, o, 0, models));
  report.models.push_back(std::move(converted));
  if (!o.source.empty()) {
    ASSIGN_OR_RETURN(ServeBenchModel source,
                     MeasureModel("source", o.source, o, 1, models));
    report.models.push_back(std::move(source));
  }
  return report;
}

namespace {

json LatencyJson(const LatencySummary& l) {
  return {{"p50_ms", l.p50_ms},
          {"p99_ms", l.p99_ms},
          {"mean_ms", l.mean_ms},
          {"samples", l.samples}};
}

}  // namespace

json ServeBenchReport::ToJson() const {
  json models_json = json::array();
  for (const ServeBenchModel& m : models) {
    json batching = json::array();
    for (const BatchingRun& b : m.batching) {
      batching.push_back(
          {{"streams", b.streams},
           {"seconds", b.seconds},
           {"completion_tokens", b.completion_tokens},
           {"decode_tokens_per_second", b.decode_tokens_per_second},
           {"ttft", LatencyJson(b.ttft)},
           {"itl", LatencyJson(b.itl)},
           {"mean_decode_step_ms", b.mean_decode_step_ms}});
    }
    json j = {{"label", m.label},
              {"checkpoint", m.checkpoint},
              {"layout", m.layout},
              {"engine", m.engine},
              {"cache_bytes_per_sequence", m.cache_bytes_per_sequence},
              {"sequences_that_fit", m.sequences_that_fit},
              {"admitted", m.admitted},
              {"batching", batching}};
    if (m.engine_steps.batch > 0) {
      j["engine_steps"] = {{"batch", m.engine_steps.batch},
                           {"context", m.engine_steps.context},
                           {"steps", m.engine_steps.steps},
                           {"one_ms", m.engine_steps.one_ms},
                           {"batch_ms", m.engine_steps.batch_ms}};
    }
    if (options.soak_seconds > 0) {
      j["soak"] = {{"seconds", m.soak.seconds},
                   {"requests", m.soak.requests},
                   {"completed", m.soak.completed},
                   {"abandoned", m.soak.abandoned},
                   {"server_errors", m.soak.server_errors},
                   {"refused", m.soak.refused},
                   {"rss_before", m.soak.rss_before},
                   {"rss_after", m.soak.rss_after}};
    }
    models_json.push_back(std::move(j));
  }
  const BatcherOptions& b = options.batcher;
  return {{"options",
           {{"clients", options.clients},
            {"requests", options.requests},
            {"prompt_tokens", options.prompt_tokens},
            {"max_tokens", options.max_tokens},
            {"kv_memory", b.kv_memory},
            {"max_seqs", b.max_seqs},
            {"context", b.context},
            {"cache_dtype", kernels::CacheDTypeName(b.cache_dtype)},
            {"engine_steps", options.engine_steps},
            {"soak_seconds", options.soak_seconds},
            {"abort_share", options.abort_share}}},
          {"models", models_json}};
}

std::string ServeBenchReport::ToText() const {
  const BatcherOptions& b = options.batcher;
  std::string out = absl::StrFormat(
      "bench serve: KV memory %d bytes (%s cache), context %d, --max-seqs %d; "
      "batching: %d "
      "requests per stream of %d prompt + %d generated tokens\n\n",
      b.kv_memory, kernels::CacheDTypeName(b.cache_dtype), b.context,
      b.max_seqs, options.requests, options.prompt_tokens, options.max_tokens);
  absl::StrAppend(
      &out,
      "| model | layout (engine) | cache per sequence | fit | admitted | "
      "streams | "
      "tokens/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | decode step ms |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ServeBenchModel& m : models) {
    for (const BatchingRun& r : m.batching) {
      absl::StrAppend(
          &out, absl::StrFormat(
                    "| %s | %s (%s) | %d | %d | %d | %d | %.1f | %.0f / %.0f | "
                    "%.1f / %.1f | %.1f |\n",
                    m.label, m.layout, m.engine, m.cache_bytes_per_sequence,
                    m.sequences_that_fit, m.admitted, r.streams,
                    r.decode_tokens_per_second, r.ttft.p50_ms, r.ttft.p99_ms,
                    r.itl.p50_ms, r.itl.p99_ms, r.mean_decode_step_ms));
    }
  }
  for (const ServeBenchModel& m : models) {
    if (m.batching.size() == 2 && m.batching[0].decode_tokens_per_second > 0 &&
        m.batching[0].mean_decode_step_ms > 0) {
      absl::StrAppend(
          &out, absl::StrFormat("\n%s: %d streams decode %.2fx the tokens/s of "
                                "one; a %d-sequence "
                                "decode step costs %.2fx a 1-sequence step",
                                m.label, m.batching[1].streams,
                                m.batching[1].decode_tokens_per_second /
                                    m.batching[0].decode_tokens_per_second,
                                m.batching[1].streams,
                                m.batching[1].mean_decode_step_ms /
                                    m.batching[0].mean_decode_step_ms));
    }
    if (const EngineStepTiming& e = m.engine_steps; e.batch > 0) {
      absl::StrAppend(
          &out, absl::StrFormat(
                    "\n%s engines alone (no sampling or streaming), steps "
                    "alternated at context %d: a %d-sequence step %.1f ms, a "
                    "1-sequence step %.1f ms (%.2fx; medians of %d)",
                    m.label, e.context, e.batch, e.batch_ms, e.one_ms,
                    e.batch_ms / e.one_ms, e.steps));
    }
    if (options.soak_seconds > 0) {
      const SoakRun& s = m.soak;
      absl::StrAppend(
          &out,
          absl::StrFormat("\n%s soak: %.0f s, %d requests (%d completed, %d "
                          "abandoned, %d refused), "
                          "%d server errors; RSS %.1f -> %.1f MiB (%+.1f %%)",
                          m.label, s.seconds, s.requests, s.completed,
                          s.abandoned, s.refused, s.server_errors,
                          s.rss_before / 1048576.0, s.rss_after / 1048576.0,
                          100.0 * (s.rss_after - s.rss_before) /
                              std::max<int64_t>(1, s.rss_before)));
    }
  }
  if (models.size() == 2 && models[1].admitted > 0) {
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "\n\nconverted / source at the same KV memory: %.2fx the sequences "
            "admitted (%d vs %d), %.2fx the cache per sequence",
            static_cast<double>(models[0].admitted) / models[1].admitted,
            models[0].admitted, models[1].admitted,
            static_cast<double>(models[0].cache_bytes_per_sequence) /
                models[1].cache_bytes_per_sequence));
    const auto& a = models[0].batching.back();
    const auto& s = models[1].batching.back();
    if (s.decode_tokens_per_second > 0) {
      absl::StrAppend(
          &out, absl::StrFormat(
                    "; %d streams: %.2fx the tokens/s", a.streams,
                    a.decode_tokens_per_second / s.decode_tokens_per_second));
    }
  }
  return out + "\n";
}

}  // namespace lrkv
