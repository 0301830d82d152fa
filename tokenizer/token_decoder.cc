// tokenizer.json decoders (see token_decoder.h).
#include "tokenizer/token_decoder.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode_text.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// "<0xAB>" -> 0xAB; -1 for anything else.
int ByteToken(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string ByteLevelToBytes(const std::string& token) {
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    const int b = ByteLevelByte(NextCodepoint(token, &pos));
    // A token with a character outside the byte map (an added token) stays as is.
    if (b < 0) return token;
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

}  // namespace

absl::Status TokenDecoder::Add(const json& j, const std::string& where,
                               std::vector<Step>* steps) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, ComponentType(j, where));
  const std::string here = absl::StrCat(where, " (", type, ")");
  Step s{Step::kFuse};
  if (type == "Sequence") {
    return ForEachListed(j, "decoders", where, [&](const json& item, const std::string& at) {
      return Add(item, at, steps);
    });
  } else if (type == "ByteLevel") {
    s.kind = Step::kByteLevel;
  } else if (type == "Metaspace") {
    s.kind = Step::kMetaspace;
    s.replacement = j.value("replacement", std::string("\xe2\x96\x81"));
    const std::string scheme = j.value("prepend_scheme", std::string());
    s.strip_first = scheme.empty() ? j.value("add_prefix_space", true) : scheme != "never";
  } else if (type == "Replace") {
    s.kind = Step::kReplace;
    ASSIGN_OR_RETURN(s.pattern, PatternFromJson(j.value("pattern", json()), here));
    if (!j.contains("content") || !j["content"].is_string()) {
      return Invalid(absl::StrCat(here, ": 'content' must be a string"));
    }
    s.content = j["content"].get<std::string>();
  } else if (type == "ByteFallback") {
    s.kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    s.kind = Step::kFuse;
  } else if (type == "Strip") {
    s.kind = Step::kStrip;
    s.replacement = j.value("content", std::string(" "));
    s.start = j.value("start", 0);
    s.stop = j.value("stop", 0);
  } else {
    return Invalid(absl::StrCat(where, ": decoder type '", type,
                                "' is not supported (supported: ByteLevel, Metaspace, Replace, "
                                "ByteFallback, Fuse, Strip, Sequence)"));
  }
  steps->push_back(std::move(s));
  return absl::OkStatus();
}

absl::StatusOr<TokenDecoder> TokenDecoder::FromJson(const json& j, const std::string& where) {
  TokenDecoder d;
  RETURN_IF_ERROR(Add(j, where, &d.steps_));
  return d;
}

std::string TokenDecoder::Decode(std::vector<std::string> tokens, bool continuation) const {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::kByteLevel:
        for (auto& t : tokens) t = ByteLevelToBytes(t);
        break;
      case Step::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (size_t pos = 0; pos < t.size();) {
            if (t.compare(pos, s.replacement.size(), s.replacement) == 0) {
              out.push_back(' ');
              pos += s.replacement.size();
            } else {
              out.push_back(t[pos++]);
            }
          }
          if (i == 0 && !continuation && s.strip_first && !out.empty() && out[0] == ' ') {
            out.erase(0, 1);
          }
          tokens[i] = std::move(out);
        }
        break;
      case Step::kReplace:
        for (auto& t : tokens) t = ReplaceAll(t, s.pattern, s.content);
        break;
      case Step::kByteFallback: {
        // Runs of <0xXX> tokens become the text of their bytes; a run that is not
        // valid UTF-8 becomes one U+FFFD per byte, as the Rust crate does. A lone
        // token (continuation decoding) keeps its raw byte so that pieces concatenate.
        std::vector<std::string> out;
        std::string run;
        size_t run_tokens = 0;
        auto flush = [&] {
          if (run_tokens == 0) return;
          if (IsValidUtf8(run) || (continuation && tokens.size() == 1)) {
            out.push_back(run);
          } else {
            for (size_t k = 0; k < run_tokens; ++k) out.push_back("\xef\xbf\xbd");
          }
          run.clear();
          run_tokens = 0;
        };
        for (auto& t : tokens) {
          const int b = ByteToken(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
            ++run_tokens;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Step::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens = {std::move(all)};
        break;
      }
      case Step::kStrip:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          const std::string& c = s.replacement;
          if (c.empty()) continue;
          int start = continuation && i == 0 ? 0 : s.start;
          while (start-- > 0 && t.compare(0, c.size(), c) == 0) t.erase(0, c.size());
          int stop = s.stop;
          while (stop-- > 0 && t.size() >= c.size() &&
                 t.compare(t.size() - c.size(), c.size(), c) == 0) {
            t.erase(t.size() - c.size());
          }
        }
        break;
    }
  }
  std::string text;
  for (const auto& t : tokens) text += t;
  return text;
}

}  // namespace lrkv
