// The K/V variant registry (surgery/kv_variant.h): every variant registered
// once, in KvVariant order; its name parses back; exactly one variant
// describes each model config, and its accounting config reads as the model's
// sizes; a conversion to each convertible variant resolves through its type.
#include "surgery/kv_variant.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lrkv {
namespace {

using ::testing::HasSubstr;

ModelConfig Dense(int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.num_layers = 2;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 16;
  c.hidden_size = heads * 16;
  c.rope_dim = 16;
  return c;
}

TEST(KvVariant, EachVariantIsRegisteredOnceInOrderAndParsesBack) {
  std::set<std::string> names;
  const auto& all = AllKvVariantTypes();
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(all[i]->id()), i) << all[i]->name();
    EXPECT_TRUE(names.insert(all[i]->name()).second) << all[i]->name();
    auto parsed = ParseKvVariant(absl::AsciiStrToUpper(all[i]->name()));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(&KvVariantTypeOf(*parsed), all[i]);
  }
  EXPECT_EQ(all.size(), 5u);
  auto bad = ParseKvVariant("mla2");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("mha, gqa, mqa, mla, lrkv"));
}

TEST(KvVariant, ExactlyOneVariantDescribesEachModel) {
  ModelConfig lrkv = Dense(8, 4);
  lrkv.kv.layout = KvLayout::kLrkv;
  lrkv.kv.rank = 6;
  lrkv.kv.layer_sizes = {6, 4};
  ModelConfig mla = Dense(8, 4);
  mla.kv.layout = KvLayout::kMla;
  mla.kv.latent = 24;
  mla.kv.rope_mode = RopeMode::kPartial;
  mla.kv.rope_planes_kept = 4;
  const struct {
    ModelConfig config;
    std::string reads;
  } cases[] = {{Dense(8, 8), "mha"},        {Dense(1, 1), "mha"},
               {Dense(8, 2), "gqa n_kv=2"}, {Dense(8, 1), "mqa"},
               {lrkv, "lrkv r=[6,4]"},      {mla, "mla d_c=24 d_rope=8"}};
  for (const auto& c : cases) {
    int describing = 0;
    for (const KvVariantType* t : AllKvVariantTypes()) {
      describing += t->Describes(c.config);
    }
    EXPECT_EQ(describing, 1) << c.reads;
    EXPECT_EQ(KvConfigOf(c.config).ToString(), c.reads);
  }
}

TEST(KvVariant, EveryConvertibleVariantResolvesItsBudgetThroughItsType) {
  const ModelConfig source = Dense(8, 4);
  for (const KvVariantType* t : AllKvVariantTypes()) {
    ConversionOptions o;
    o.variant = t->id();
    o.budget = 0.5;
    o.rope_mode = t->DefaultRopeMode(o);
    auto target = ResolveTarget(source, o);
    if (!t->convertible()) {
      EXPECT_THAT(target.status().message(), HasSubstr("is the source itself"));
      continue;
    }
    ASSERT_TRUE(target.ok()) << t->name() << ": " << target.status();
    EXPECT_EQ(target->variant, t->id());
    const double ratio =
        static_cast<double>(CacheElementsPerToken(ShapeOf(source), *target)) /
        SourceCacheElements(ShapeOf(source));
    EXPECT_LE(ratio, 0.5) << target->ToString();
    // Every RoPE mode the type does not take is refused, naming the variant.
    for (RopeMode m : {RopeMode::kReconstruct, RopeMode::kPlane,
                       RopeMode::kPartial, RopeMode::kSharedPlane}) {
      const auto own = t->rope_modes();
      if (std::find(own.begin(), own.end(), m) != own.end()) continue;
      o.rope_mode = m;
      auto refused = ResolveTarget(source, o);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(refused.status().message(),
                  HasSubstr(absl::StrCat("; ", t->name())));
    }
  }
}

}  // namespace
}  // namespace lrkv
