// Cache accounting and the budget planner: the paper's configurations
// (docs/design.md, "The math that must hold"), the corrected 324 MiB, and
// impossible requests.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "surgery/cache_accounting.h"

namespace lrkv {
namespace {

using ::testing::HasSubstr;

AttentionShape Mha(int64_t layers, int64_t heads, int64_t head_dim) {
  AttentionShape s;
  s.layers = layers;
  s.heads = heads;
  s.head_dim = head_dim;
  return s;
}

KvConfig Lrkv(int64_t r) {
  KvConfig c;
  c.variant = KvVariant::kLrkv;
  c.rank = r;
  return c;
}

TEST(CacheAccounting, ReproducesThePaperConfigurations) {
  struct Row {
    int64_t heads, rank;
    double percent;
  } rows[] = {{6, 46, 52.60}, {12, 51, 48.18}, {18, 55, 48.52}, {32, 54, 45.31}};
  for (const auto& row : rows) {
    const auto f = MeasureFootprint(Mha(1, row.heads, 128), Lrkv(row.rank), 1, 1, 2);
    EXPECT_NEAR(100 * f.ratio_to_mha, row.percent, 0.005) << row.heads;
    // Ratio = 1/H + r/d_h exactly.
    EXPECT_DOUBLE_EQ(f.ratio_to_mha, 1.0 / row.heads + row.rank / 128.0);
  }
  EXPECT_EQ(CacheElementsPerToken(Mha(1, 18, 128), Lrkv(55)), 2236);
  KvConfig mha;
  EXPECT_EQ(CacheElementsPerToken(Mha(1, 18, 128), mha), 4608);
}

TEST(CacheAccounting, CorrectedAppendixBytes) {
  // 2.5B: N = 18, H = 18, d_h = 128, L = 2048, b = 1, bf16 -> 324 MiB (not 648 MB).
  KvConfig mha;
  const auto f = MeasureFootprint(Mha(18, 18, 128), mha, 2048, 1, 2);
  EXPECT_DOUBLE_EQ(f.bytes, 324.0 * 1024 * 1024);
}

TEST(CacheAccounting, ParametersAndQkNormScales) {
  AttentionShape s = Mha(1, 12, 128);
  // LRKV K/V params 2·d·d_h + 2·H·r·(d + d_h).
  EXPECT_EQ(KvParameterCount(s, Lrkv(51)), 2 * 1536 * 128 + 2 * 12 * 51 * (1536 + 128));
  s.qk_norm = true;
  EXPECT_EQ(CacheElementsPerToken(s, Lrkv(51)), 2 * (128 + 12 * 51) + 12);
}

TEST(BudgetPlanner, PicksTheLargestConfigurationWithinBudget) {
  AttentionShape s = Mha(5, 8, 8);
  s.kv_heads = 4;  // stories260K
  s.hidden = 64;
  auto lrkv = PlanForBudget(s, KvVariant::kLrkv, 0.5);
  ASSERT_TRUE(lrkv.ok());
  EXPECT_EQ(lrkv->rank, 2);  // 2(8 + 4·2) = 32 = 0.5 · 64
  auto gqa = PlanForBudget(s, KvVariant::kGqa, 0.5);
  ASSERT_TRUE(gqa.ok());
  EXPECT_EQ(gqa->kv_heads, 2);
  auto mla = PlanForBudget(s, KvVariant::kMla, 0.5);
  ASSERT_TRUE(mla.ok());
  EXPECT_EQ(mla->latent, 32);
  auto lrkv_75 = PlanForBudget(s, KvVariant::kLrkv, 0.75);
  ASSERT_TRUE(lrkv_75.ok());
  EXPECT_EQ(lrkv_75->rank, 4);  // 2(8 + 16) = 48 = 0.75 · 64
  auto plane = PlanForBudget(s, KvVariant::kLrkv, 0.7, /*even_rank=*/true);
  ASSERT_TRUE(plane.ok());
  EXPECT_EQ(plane->rank, 2);  // r = 3 would fit, but plane mode needs even r
  // Paper shape: ρ = 0.4818 gives r = 51.
  auto paper = PlanForBudget(Mha(24, 12, 128), KvVariant::kLrkv, 0.4818);
  ASSERT_TRUE(paper.ok());
  EXPECT_EQ(paper->rank, 51);
}

TEST(BudgetPlanner, ImpossibleBudgetsNameTheValidRange) {
  const AttentionShape s = Mha(1, 8, 64);
  auto r = PlanForBudget(s, KvVariant::kLrkv, 0.1);  // r = 0 needs 1/8
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("valid budgets are [0.1250, 1]"));
  EXPECT_EQ(PlanForBudget(s, KvVariant::kLrkv, 1.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanForBudget(s, KvVariant::kLrkv, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BudgetPlanner, ValidatesExplicitSizes) {
  const AttentionShape s = Mha(1, 12, 64);
  auto big = ValidateKvConfig(s, Lrkv(65));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.message()), HasSubstr("[0, 64]"));
  KvConfig gqa;
  gqa.variant = KvVariant::kGqa;
  gqa.kv_heads = 5;
  auto bad = ValidateKvConfig(s, gqa);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("must divide the 12 query heads"));
  EXPECT_EQ(ParseKvVariant("mamba").status().code(), absl::StatusCode::kInvalidArgument);
  KvConfig odd = Lrkv(3);
  odd.even_rank = true;
  EXPECT_EQ(ValidateKvConfig(s, odd).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CacheComparison, MatchesMlaToLrkvAtEqualCache) {
  CacheQuery q;
  q.rank = 55;
  q.context = 2048;
  auto rows = CompareCacheFootprints(Mha(18, 18, 128), q);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);  // mha, mqa, mla, lrkv
  EXPECT_EQ((*rows)[2].config.latent, 2236);
  EXPECT_EQ((*rows)[2].elements_per_token_layer, (*rows)[3].elements_per_token_layer);
  q.rank = -1;
  EXPECT_FALSE(CompareCacheFootprints(Mha(18, 18, 128), q).ok());  // nothing given
}

}  // namespace
}  // namespace lrkv
