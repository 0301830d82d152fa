// The SentencePiece BPE tokenizer: the merge rule on a hand-made vocabulary, byte
// fallback, control/unknown tokens, and decode(encode(s)) == s on real text.
#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "formats/gguf.h"
#include "formats/text_corpus.h"
#include "tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using ::testing::ElementsAre;

// ids: 0 <unk>, 1 <s>, 2 </s>, 3 <0xC3>, 4 <0xA9>, 5 ▁, 6 a, 7 b, 8 c, 9 ab, 10 bc,
// 11 ▁a, 12 abc, 13 aa
Vocabulary TinyVocab() {
  Vocabulary v;
  v.pieces = {"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\xe2\x96\x81", "a", "b",
              "c",     "ab",  "bc",   "\xe2\x96\x81" "a",   "abc",   "aa"};
  v.scores = {0, 0, 0, 0, 0, -10, -10, -10, -10, -2, -0.5, -1, -0.1, -3};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
             TokenType::kByte,    TokenType::kByte};
  v.types.resize(v.pieces.size(), TokenType::kNormal);
  return v;
}

Tokenizer TinyTokenizer() {
  auto t = Tokenizer::Create(TinyVocab());
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(Tokenizer, MergesTheHighestScoringPairFirst) {
  const Tokenizer t = TinyTokenizer();
  // "▁abc": bc (-0.5) beats ▁a (-1) and ab (-2); then a+bc = abc (-0.1) beats ▁a.
  EXPECT_THAT(t.Encode("abc"), ElementsAre(5, 12));
  // "▁ab": ▁a (-1) beats ab (-2); "▁ab" is not a piece.
  EXPECT_THAT(t.Encode("ab"), ElementsAre(11, 7));
}

TEST(Tokenizer, EqualScoresMergeLeftmostFirst) {
  Vocabulary v = TinyVocab();
  v.add_space_prefix = false;
  auto t = Tokenizer::Create(v);
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(t->Encode("aaa"), ElementsAre(13, 6));
}

TEST(Tokenizer, UnknownCharactersFallBackToBytes) {
  const Tokenizer t = TinyTokenizer();
  // "é" is C3 A9 in UTF-8 and not a piece; "z" has no byte token either -> <unk>.
  EXPECT_THAT(t.Encode("\xc3\xa9"), ElementsAre(5, 3, 4));
  EXPECT_THAT(t.Encode("z"), ElementsAre(5, 0));
  EXPECT_EQ(t.Decode({5, 3, 4}), "\xc3\xa9");
}

TEST(Tokenizer, DecodeDropsControlTokensAndTheDummyPrefix) {
  const Tokenizer t = TinyTokenizer();
  EXPECT_EQ(t.Decode({1, 11, 7, 5, 12, 2}), "ab abc");
  EXPECT_EQ(t.TokenToPiece(11), " a");
  EXPECT_EQ(t.TokenToPiece(1), "");
  EXPECT_EQ(t.TokenToPiece(0), "\xe2\x96\x85");  // llama.cpp prints <unk> as ▅
}

TEST(Tokenizer, RejectsInconsistentVocabularies) {
  Vocabulary v = TinyVocab();
  v.scores.pop_back();
  EXPECT_EQ(Tokenizer::Create(v).status().code(), absl::StatusCode::kInvalidArgument);
  v = TinyVocab();
  v.pieces[7] = "a";
  EXPECT_EQ(Tokenizer::Create(v).status().code(), absl::StatusCode::kInvalidArgument);
  v = TinyVocab();
  v.bos_id = 99;
  EXPECT_EQ(Tokenizer::Create(v).status().code(), absl::StatusCode::kInvalidArgument);
}

class StoriesTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ASSERT_NE((*ckpt)->tokenizer(), nullptr);
    tokenizer_ = std::make_unique<Tokenizer>(*(*ckpt)->tokenizer());
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(StoriesTokenizer, VocabularyMatchesTheModel) {
  EXPECT_EQ(tokenizer_->size(), 512);
  ASSERT_NE(tokenizer_->spm(), nullptr);
  EXPECT_EQ(tokenizer_->specials().bos_id, 1);
  EXPECT_EQ(tokenizer_->specials().eos_id, 2);
  EXPECT_EQ(tokenizer_->spm()->vocab().pieces[13], "<0x0A>");
}

TEST_F(StoriesTokenizer, RoundTripsEveryStoryOfTheExcerpt) {
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok()) << docs.status();
  int64_t tokens = 0;
  for (const auto& doc : *docs) {
    const auto ids = tokenizer_->Encode(doc);
    tokens += static_cast<int64_t>(ids.size());
    ASSERT_EQ(tokenizer_->Decode(ids), doc);
  }
  // BPE compresses: far fewer tokens than characters.
  size_t chars = 0;
  for (const auto& d : *docs) chars += d.size();
  EXPECT_LT(tokens, static_cast<int64_t>(chars) / 2);
}

TEST_F(StoriesTokenizer, RoundTripsNonAsciiTextThroughByteFallback) {
  const std::string s =
      "Caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"
      "\ttab\nnew line,  two spaces <s> </s> <unk> \xe2\x96\x81";
  const auto ids = tokenizer_->Encode(s);
  const auto& types = tokenizer_->spm()->vocab().types;
  EXPECT_TRUE(std::any_of(ids.begin(), ids.end(),
                          [&](int32_t id) { return types[id] == TokenType::kByte; }));
  // Special-token text is plain text: no control token is produced.
  EXPECT_TRUE(std::none_of(ids.begin(), ids.end(),
                           [&](int32_t id) { return types[id] == TokenType::kControl; }));
  // "▁" (U+2581) in the input decodes as a space, exactly as SentencePiece does.
  std::string expected = s.substr(0, s.size() - 3) + " ";
  EXPECT_EQ(tokenizer_->Decode(ids), expected);
  EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(" leading space")), " leading space");
  EXPECT_TRUE(tokenizer_->Encode("").empty());
}

TEST_F(StoriesTokenizer, JsonFormRoundTrips) {
  const auto files = tokenizer_->Files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].name, kTokenizerFileName);
  auto again = Tokenizer::FromJson(files[0].contents, "tok.json");
  ASSERT_TRUE(again.ok()) << again.status();
  const std::string s = "Once upon a time, Lily saw a big dog.";
  EXPECT_EQ(again->Encode(s), tokenizer_->Encode(s));
}

}  // namespace
}  // namespace lrkv
