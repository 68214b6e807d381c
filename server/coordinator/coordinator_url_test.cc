#include "server/coordinator/coordinator_url.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CoordinatorUrlTest, ParsesEndpointsAndCluster) {
  absl::StatusOr<CoordinatorUrl> url = ParseCoordinatorUrl(
      "etcd://10.0.0.1:2379,etcd-1.summon:2379,[::1]:23790/prod-a");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_THAT(url->endpoints, ElementsAre("10.0.0.1:2379", "etcd-1.summon:2379",
                                          "[::1]:23790"));
  EXPECT_EQ(url->cluster, "prod-a");
}

TEST(CoordinatorUrlTest, OneEndpoint) {
  absl::StatusOr<CoordinatorUrl> url =
      ParseCoordinatorUrl("etcd://127.0.0.1:23791/c_1.x");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_THAT(url->endpoints, ElementsAre("127.0.0.1:23791"));
  EXPECT_EQ(url->cluster, "c_1.x");
}

TEST(CoordinatorUrlTest, RefusesWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://127.0.0.1:2379/c", "only etcd:// coordinators are known"},
      {"etcd://127.0.0.1:2379", "no /CLUSTER after the endpoints"},
      {"etcd:///c", "no etcd endpoint"},
      {"etcd://127.0.0.1/c", "endpoint '127.0.0.1' is not HOST:PORT"},
      {"etcd://127.0.0.1:0/c",
       "endpoint '127.0.0.1:0' has no port in 1..65535"},
      {"etcd://127.0.0.1:65536/c", "has no port in 1..65535"},
      {"etcd://:2379/c", "endpoint ':2379' has no host"},
      {"etcd://a:1,,b:2/c", "endpoint '' is not HOST:PORT"},
      {"etcd://a:1,a:1/c", "endpoint 'a:1' is repeated"},
      {"etcd://a:1/", "no cluster name after '/'"},
      {"etcd://a:1/x/y", "the cluster name must be 1 to 63"},
      {"etcd://a:1/..", "the cluster name must be 1 to 63"},
      {"etcd://a:1/" + std::string(64, 'c'), "the cluster name must be"},
  };
  for (const auto& [input, reason] : cases) {
    absl::StatusOr<CoordinatorUrl> url = ParseCoordinatorUrl(input);
    ASSERT_FALSE(url.ok()) << input;
    EXPECT_EQ(url.status().code(), absl::StatusCode::kInvalidArgument) << input;
    EXPECT_THAT(url.status().message(), HasSubstr(reason)) << input;
    EXPECT_THAT(url.status().message(),
                HasSubstr("expected etcd://HOST:PORT[,HOST:PORT...]/CLUSTER"));
  }
}

TEST(CoordinatorFlagTest, StaticByDefaultOrByName) {
  for (const char* flag : {"", "static"}) {
    absl::StatusOr<CoordinatorChoice> choice = ParseCoordinatorFlag(flag);
    ASSERT_TRUE(choice.ok()) << flag;
    EXPECT_FALSE(choice->etcd) << flag;
  }
}

TEST(CoordinatorFlagTest, EtcdUrlIsParsed) {
  absl::StatusOr<CoordinatorChoice> choice =
      ParseCoordinatorFlag("etcd://127.0.0.1:2379,127.0.0.1:2380/lab");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_TRUE(choice->etcd);
  EXPECT_EQ(choice->url.cluster, "lab");
  EXPECT_EQ(choice->url.endpoints,
            (std::vector<std::string>{"127.0.0.1:2379", "127.0.0.1:2380"}));
}

TEST(CoordinatorFlagTest, RefusesOtherNames) {
  for (const char* flag : {"etcd", "zookeeper", "STATIC"}) {
    absl::StatusOr<CoordinatorChoice> choice = ParseCoordinatorFlag(flag);
    ASSERT_FALSE(choice.ok()) << flag;
    EXPECT_EQ(choice.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(choice.status().message(),
                HasSubstr("use static, or an etcd:// URL"));
  }
  EXPECT_THAT(ParseCoordinatorFlag("etcd://x:1").status().message(),
              HasSubstr("no /CLUSTER after the endpoints"));
}

}  // namespace
}  // namespace summon::server
