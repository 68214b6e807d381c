#include "core/closest_name.h"

#include "gtest/gtest.h"

namespace summon::core {
namespace {

TEST(ClosestNameTest, SuggestsOnlyWhatIsClose) {
  const std::vector<std::string> names = {"gpt", "gpt2", "llama", "local-ranks",
                                          "listen", "metrics-listen"};
  EXPECT_EQ(ClosestName("gtp", names), "gpt");
  EXPECT_EQ(ClosestName("lama", names), "llama");
  EXPECT_EQ(ClosestName("local-rnaks", names), "local-ranks");
  EXPECT_EQ(ClosestName("metrics-listn", names), "metrics-listen");
  EXPECT_EQ(ClosestName("metr", names), "metrics-listen");  // A prefix.
  EXPECT_EQ(ClosestName("frobnicate", names), "");
  EXPECT_EQ(ClosestName("gpt", names), "");  // Not mistyped.
  EXPECT_EQ(ClosestName("x", {}), "");
}

}  // namespace
}  // namespace summon::core
