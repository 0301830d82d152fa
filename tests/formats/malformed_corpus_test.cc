// Every file of the hand-made malformed corpus is rejected with InvalidArgument and a
// message naming the file and the problem. Also runs under ASan/UBSan in CI.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<std::string, std::string>> ReadManifest() {
  std::ifstream in(testing::FixturePath("malformed/MANIFEST.tsv"));
  std::vector<std::pair<std::string, std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    rows.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return rows;
}

TEST(MalformedCorpus, HasAtLeastFifteenFiles) {
  EXPECT_GE(ReadManifest().size(), 15u);
}

TEST(MalformedCorpus, EveryFileIsRejectedWithANamedProblem) {
  for (const auto& [file, phrase] : ReadManifest()) {
    SCOPED_TRACE(file);
    const std::string path = testing::FixturePath("malformed/" + file);
    ASSERT_TRUE(std::filesystem::exists(path));
    auto ckpt = Checkpoint::Open(path);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument)
        << ckpt.status();
    EXPECT_THAT(std::string(ckpt.status().message()), HasSubstr(phrase));
    EXPECT_THAT(std::string(ckpt.status().message()), HasSubstr(file));
  }
}

// The parsers themselves (as the fuzzers call them) on every truncation of each
// corpus file: never crash, never accept a truncated valid header silently.
TEST(MalformedCorpus, ParsersSurviveEveryPrefix) {
  for (const auto& [file, phrase] : ReadManifest()) {
    auto mapped = MappedFile::Open(testing::FixturePath("malformed/" + file));
    ASSERT_TRUE(mapped.ok());
    const auto bytes = (*mapped)->bytes();
    for (size_t n = 0; n <= bytes.size(); ++n) {
      auto st = ParseSafetensors(bytes.subspan(0, n));
      auto gg = ParseGguf(bytes.subspan(0, n));
      if (!st.ok()) EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
      if (!gg.ok()) EXPECT_EQ(gg.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

// Every malformed tokenizer.json (or tokenizer_config.json) is refused when the
// tokenizer is loaded, with InvalidArgument naming the file and the problem.
TEST(MalformedCorpus, EveryTokenizerFolderIsRejectedWithANamedProblem) {
  std::ifstream in(testing::FixturePath("malformed_tokenizers/MANIFEST.tsv"));
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string folder = line.substr(0, line.find('\t'));
    const std::string phrase = line.substr(line.find('\t') + 1);
    SCOPED_TRACE(folder);
    const std::string path = testing::FixturePath("malformed_tokenizers/" + folder);
    auto tok = LoadTokenizer(path);
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr(phrase));
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr(path));
    ++cases;
  }
  EXPECT_GE(cases, 20);
}

}  // namespace
}  // namespace lrkv
