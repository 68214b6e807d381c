#include "core/json_error.h"

#include "gtest/gtest.h"

namespace summon::core {
namespace {

TEST(JsonSyntaxErrorTest, ValidJsonHasNoError) {
  EXPECT_EQ(JsonSyntaxError("{\"units\": [1, 2]}"), "");
}

TEST(JsonSyntaxErrorTest, NamesTheLineAndColumnOfTheOffendingByte) {
  // The stray '}' on line 3: a key was expected after the comma.
  EXPECT_EQ(JsonSyntaxError("{\n  \"units\": [],\n}\n"),
            "line 3, column 1: unexpected '}'; expected string literal");
  EXPECT_EQ(JsonSyntaxError("{\"a\": tru}"),
            "line 1, column 10: invalid literal");
}

TEST(JsonSyntaxErrorTest, EmptyAndTruncatedTextsPointAtTheEnd) {
  EXPECT_NE(JsonSyntaxError("").find("line 1, column 1: "), std::string::npos)
      << JsonSyntaxError("");
  EXPECT_NE(JsonSyntaxError("{\n\"a\": 1").find("line 2, column 7: "),
            std::string::npos)
      << JsonSyntaxError("{\n\"a\": 1");
}

TEST(PositionOfTest, CountsLinesAndColumnsFromOne) {
  EXPECT_EQ(PositionOf("ab\ncd", 0).line, 1);
  EXPECT_EQ(PositionOf("ab\ncd", 4).line, 2);
  EXPECT_EQ(PositionOf("ab\ncd", 4).column, 2);
}

}  // namespace
}  // namespace summon::core
