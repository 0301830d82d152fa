// base/median.h: the middle value, or the mean of the two middle ones.
#include "base/median.h"

#include <gtest/gtest.h>

namespace lrkv {
namespace {

TEST(Median, TakesTheMiddleValueOrTheMeanOfTheTwoMiddleOnes) {
  EXPECT_EQ(Median({4.0}), 4.0);
  EXPECT_EQ(Median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_EQ(Median({9.0, 1.0, 5.0, 2.0}), 3.5);
  EXPECT_EQ(Median({7.0, 7.0, 1.0, 100.0, 7.0, 2.0}), 7.0);
  EXPECT_EQ(Median({3.0, 1.0}), 2.0);
}

}  // namespace
}  // namespace lrkv
