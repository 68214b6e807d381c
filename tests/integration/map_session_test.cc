// MapSession, the same-node read path, end to end: a read-only session's
// copy (params and gradients) mapped into the test process holds exactly the
// seeded values; the mapping cannot be written; writable sessions, sessions
// with their own edits, unknown sessions and missing gradients are refused
// with their codes; a grant is good once and ends with its session.

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "client/lib/local_map.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

class MapSessionTest : public SummondTest {
 protected:
  void SetUp() override { StartServer(); }

  grpc::Status TryMap(const std::string& session, bool grad,
                      pb::MapSessionResponse* grant) {
    pb::MapSessionRequest request;
    request.set_session_id(session);
    request.set_grad(grad);
    grpc::ClientContext context;
    return summon_->MapSession(&context, request, grant);
  }

  client::MappedSession MapOrDie(const std::string& session, bool grad) {
    pb::MapSessionResponse grant;
    const grpc::Status status = TryMap(session, grad, &grant);
    EXPECT_TRUE(status.ok()) << status.error_message();
    absl::StatusOr<client::MappedSession> mapped =
        client::MappedSession::Map(grant);
    EXPECT_TRUE(mapped.ok()) << mapped.status();
    return *std::move(mapped);
  }
};

// Every element of every tensor, bit for bit.
void ExpectHolds(const client::MappedSession& mapped,
                 const std::string& suffix, uint64_t seed) {
  ASSERT_EQ(mapped.grant().tensors_size(),
            static_cast<int>(kBlocksParams.size()));
  for (const auto& [fqn, numel] : kBlocksParams) {
    SCOPED_TRACE(fqn);
    absl::StatusOr<absl::Span<const uint8_t>> bytes = mapped.Tensor(fqn);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const std::string expected = FloatBytes(Seeded(fqn + suffix, numel, seed));
    ASSERT_EQ(bytes->size(), expected.size());
    EXPECT_EQ(std::memcmp(bytes->data(), expected.data(), expected.size()), 0);
  }
}

TEST_F(MapSessionTest, AReadOnlySessionsCopyMapsWithTheSeededValues) {
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kBlocksLayout,
               std::vector<int>{});
  pb::SessionOptions options = ReadOnly();
  options.set_with_grads(true);
  const pb::Session session = Open("m", options);
  const client::MappedSession params = MapOrDie(session.id(), false);
  EXPECT_EQ(params.size(), SessionBufferBytes({40, 10, 25, 5, 15, 35}));
  ExpectHolds(params, "", kSeed);
  EXPECT_EQ(params.Tensor("head.w").status().code(),
            absl::StatusCode::kNotFound);  // Aliases go by their primary.
  const client::MappedSession grads = MapOrDie(session.id(), true);
  ExpectHolds(grads, ".grad", kGradSeed);
  Close(session.id());
  // Still this session's bytes after the close (never reused), until unmapped.
  ExpectHolds(params, "", kSeed);
}

TEST_F(MapSessionTest, TheMappingCannotWriteIntoTheSession) {
  CreateSeeded("m");
  const pb::Session session = Open("m", ReadOnly());
  pb::MapSessionResponse grant;
  ASSERT_TRUE(TryMap(session.id(), false, &grant).ok());
  absl::StatusOr<int> fd = client::RedeemMapToken(grant.socket(), grant.token());
  ASSERT_TRUE(fd.ok()) << fd.status();
  const size_t bytes = grant.copy_bytes();
  EXPECT_EQ(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0),
            MAP_FAILED);
  void* view = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, *fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_NE(mprotect(view, bytes, PROT_READ | PROT_WRITE), 0);
  const float one = 1.0f;
  EXPECT_LT(pwrite(*fd, &one, sizeof(one), 0), 0);
  EXPECT_NE(ftruncate(*fd, 0), 0);
  // A private (copy-on-write) mapping may be scribbled on; the session
  // never sees it.
  void* scratch =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, *fd, 0);
  ASSERT_NE(scratch, MAP_FAILED);
  std::memset(scratch, 0, bytes);
  munmap(scratch, bytes);
  munmap(view, bytes);
  close(*fd);
  EXPECT_EQ(Read(session.id(), "embed.w"), Seeded("embed.w", 40));
}

TEST_F(MapSessionTest, RefusalsNameTheirReason) {
  CreateSeeded("m");
  pb::MapSessionResponse grant;
  EXPECT_CODE(TryMap("s-nonexistent", false, &grant), NOT_FOUND);
  const pb::Session writable = Open("m", ModuleScope("layers.0"));
  grpc::Status status = TryMap(writable.id(), false, &grant);
  EXPECT_CODE(status, FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("writable"), std::string::npos);
  const pb::Session plain = Open("m", ReadOnly(ModuleScope("layers.1")));
  EXPECT_CODE(TryMap(plain.id(), true, &grant), NOT_FOUND);  // No gradients.
  // A read-only session's own edit lives in a private copy the mapping
  // would not show.
  ASSERT_TRUE(WriteFloats(plain.id(), "layers.1.w", {2.0f}).ok());
  status = TryMap(plain.id(), false, &grant);
  EXPECT_CODE(status, FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("edits of its own"),
            std::string::npos);
}

TEST_F(MapSessionTest, AGrantIsGoodOnceAndEndsWithItsSession) {
  CreateSeeded("m");
  const pb::Session session = Open("m", ReadOnly());
  pb::MapSessionResponse grant;
  ASSERT_TRUE(TryMap(session.id(), false, &grant).ok());
  EXPECT_GT(grant.token_ttl_ms(), 0u);
  absl::StatusOr<int> fd = client::RedeemMapToken(grant.socket(), grant.token());
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  EXPECT_EQ(client::RedeemMapToken(grant.socket(), grant.token()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(TryMap(session.id(), false, &grant).ok());
  Close(session.id());
  absl::StatusOr<int> late = client::RedeemMapToken(grant.socket(), grant.token());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition)
      << late.status();
  // R25: a closed session says so.
  EXPECT_CODE(TryMap(session.id(), false, &grant), FAILED_PRECONDITION);
}

}  // namespace
}  // namespace summon::tests
