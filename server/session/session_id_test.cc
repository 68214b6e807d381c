// Session ids carry the low 24 bits of the cluster epoch they were opened
// in, so a later leader can tell an earlier leader's session ("leader
// lost") from an id nobody issued.

#include "server/session/session_id.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace summon::server {
namespace {

TEST(SessionIdTest, CarriesTheEpochInItsFirstSixHexDigits) {
  const std::string id = NewSessionId(0x2f);
  ASSERT_EQ(id.size(), 18u);
  EXPECT_EQ(id.substr(0, 8), "s-00002f");
  EXPECT_EQ(SessionIdEpochTag(id), 0x2fu);
  // The single node's epoch 0; an epoch past 24 bits keeps its low bits.
  EXPECT_EQ(NewSessionId(0).substr(0, 8), "s-000000");
  EXPECT_EQ(SessionIdEpochTag(NewSessionId(0x1234567890)), 0x567890u);
  EXPECT_EQ(EpochTag(0x1234567890), 0x567890u);
}

TEST(SessionIdTest, TheRestIsRandom) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(NewSessionId(7));
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(SessionIdTest, OtherStringsHaveNoEpoch) {
  EXPECT_EQ(SessionIdEpochTag("s-00002f"), std::nullopt);
  EXPECT_EQ(SessionIdEpochTag("x-00002f0000000001"), std::nullopt);
  EXPECT_EQ(SessionIdEpochTag("s-00002f000000000g"), std::nullopt);
  EXPECT_EQ(SessionIdEpochTag("s-00002f0000000001"), 0x2fu);
}

}  // namespace
}  // namespace summon::server
