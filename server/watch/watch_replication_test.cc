// Watches on every node (issue 21): the leader's changes reach each
// follower's store, a follower that missed a step gets the whole watch, a
// leader that lost its store takes the newest copy back at formation, a
// removal is never undone by a stale copy, whole watches travel in bounded
// chunks, and a malformed chunk is refused. Stores in memory and on disk,
// the nodes' Peer calls replaced by direct calls.

#include "server/watch/watch_replication.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

constexpr char kModel[] = "m";

// Node n's store is stores[n]; node 0 leads. A node in `down` answers
// UNAVAILABLE.
class DirectReplicas : public WatchReplicas {
 public:
  explicit DirectReplicas(std::vector<WatchStore*> stores)
      : stores_(std::move(stores)) {}
  std::vector<int> Followers() const override {
    std::vector<int> nodes;
    for (int node = 1; node < static_cast<int>(stores_.size()); ++node) {
      nodes.push_back(node);
    }
    return nodes;
  }
  absl::StatusOr<std::vector<WatchVersion>> Versions(int node) override {
    if (down.count(node) > 0) return absl::UnavailableError("down");
    return stores_[node]->Versions();
  }
  absl::StatusOr<std::vector<WatchChunk>> Fetch(
      int node, const std::string& model) override {
    if (down.count(node) > 0) return absl::UnavailableError("down");
    return stores_[node]->Export(model, WatchReplication::kChunkBytes);
  }
  absl::Status Apply(int node, const WatchChunk& chunk) override {
    if (down.count(node) > 0) return absl::UnavailableError("down");
    ++applied;
    return stores_[node]->Apply(chunk);
  }
  void Replace(int node, WatchStore* store) { stores_[node] = store; }

  std::set<int> down;
  int applied = 0;

 private:
  std::vector<WatchStore*> stores_;
};

WatchSpec Spec(int64_t created_ms) {
  WatchSpec spec;
  spec.model = kModel;
  spec.globs = {"*"};
  spec.bins = 2;
  spec.watched = {"a", "b"};
  spec.created_by = "alice";
  spec.created_at = absl::FromUnixMillis(created_ms);
  return spec;
}

// Step `step`'s records: exact, distinct values per parameter and step
// in every field (a NaN in b at step 3, two infinities in a at step 4).
std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>> RecordsOf(
    int64_t step) {
  std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>> records;
  for (const std::string param : {"a", "b"}) {
    WatchRecord record;
    record.step = step;
    record.recorded_at = absl::FromUnixMillis(5000 + step);
    record.latency = absl::Microseconds(300 + step);
    core::WatchStatistics& s = record.stats;
    s.numel = 10;
    s.l2_norm = 0.1 * static_cast<double>(step) + (param == "a" ? 0 : 1.0 / 3);
    s.mean = -0.25 * static_cast<double>(step);
    s.min = param == "a" ? -1 : -1.5;
    s.max = static_cast<double>(step);
    s.abs_max = static_cast<double>(step) + 0.25;
    s.nan_count = param == "b" && step == 3 ? 1 : 0;
    s.inf_count = param == "a" && step == 4 ? 2 : 0;
    s.range = core::HistogramRange{param == "a" ? -2.0 : -3.0,
                                   static_cast<double>(step) + 0.5};
    s.histogram = {step, 10 - step};
    records.push_back({{param, false}, record});
  }
  return records;
}

void Record(WatchStore& leader, WatchReplication& replication, int64_t step,
            int64_t created_ms = 1000) {
  absl::StatusOr<WatchStore::Recorded> recorded = leader.Record(
      kModel, absl::FromUnixMillis(created_ms), RecordsOf(step));
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  ASSERT_TRUE(recorded->chunk.has_value());
  replication.PushRecord(*recorded->chunk);
}

// Everything `watch show` and `watch list` would say, as text: the spec
// (globs, every, bins, grads, creator) and every field of every record.
std::string Describe(const WatchStore& store) {
  std::string out;
  for (const WatchInfo& info : store.List()) {
    absl::StrAppend(&out, info.spec.model, " globs ",
                    absl::StrJoin(info.spec.globs, ","), " every ",
                    info.spec.every, " grads ", info.spec.grads, " created ",
                    absl::ToUnixMillis(info.spec.created_at), " by ",
                    info.spec.created_by, " bins ", info.spec.bins, " last ",
                    info.last_step.value_or(-1), "\n");
    for (const std::string& param : info.spec.watched) {
      absl::StatusOr<WatchHistory> history =
          store.Show(info.spec.model, param, false, 0);
      if (!history.ok()) {
        absl::StrAppend(&out, history.status().ToString(), "\n");
        continue;
      }
      absl::StrAppend(&out, param, " first_nonfinite ",
                      history->first_nonfinite_step.value_or(-1), ":");
      for (const WatchRecord& r : history->records) {
        const core::WatchStatistics& s = r.stats;
        absl::StrAppend(
            &out, " [", r.step, " ", absl::ToUnixMillis(r.recorded_at), " ",
            absl::ToInt64Microseconds(r.latency), " ", s.numel, " ",
            absl::StrFormat("%.17g %.17g %.17g %.17g %.17g", s.l2_norm, s.mean,
                            s.min, s.max, s.abs_max),
            " nan ", s.nan_count, " inf ", s.inf_count, " bins ",
            absl::StrJoin(s.histogram, "/"), " range ",
            s.range.has_value()
                ? absl::StrFormat("%.17g..%.17g", s.range->lower,
                                  s.range->upper)
                : "none",
            "]");
      }
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

TEST(WatchReplicationTest, EveryChangeReachesEveryFollower) {
  WatchStore leader("", 3), one("", 3), two("", 3);
  DirectReplicas replicas({&leader, &one, &two});
  WatchReplication replication(&leader, &replicas);
  ASSERT_TRUE(leader.Add(Spec(1000)).ok());
  replication.PushModel(kModel);
  for (int64_t step = 1; step <= 5; ++step) Record(leader, replication, step);
  const std::string expected = Describe(leader);
  // The ring keeps 3; NaN first seen at step 3.
  EXPECT_NE(expected.find("b first_nonfinite 3: [3 "), std::string::npos)
      << expected;
  EXPECT_EQ(Describe(one), expected);
  EXPECT_EQ(Describe(two), expected);
  // One chunk per follower per step: nothing is sent twice.
  EXPECT_EQ(replicas.applied, 2 * (2 + 5));  // replace + commit, 5 records

  ASSERT_TRUE(leader.Remove(kModel).ok());
  replication.PushModel(kModel);
  EXPECT_EQ(Describe(one), "");
  EXPECT_EQ(Describe(two), "");
}

TEST(WatchReplicationTest, AFollowerThatMissedAStepGetsTheWholeWatch) {
  WatchStore leader("", 100), one("", 100);
  DirectReplicas replicas({&leader, &one});
  WatchReplication replication(&leader, &replicas);
  ASSERT_TRUE(leader.Add(Spec(1000)).ok());
  replication.PushModel(kModel);
  Record(leader, replication, 1);
  replicas.down = {1};
  Record(leader, replication, 2);
  replicas.down.clear();
  // Step 3 does not follow step 1: refused, then the whole watch instead.
  Record(leader, replication, 3);
  EXPECT_EQ(Describe(one), Describe(leader));
  EXPECT_NE(Describe(one).find("[2 "), std::string::npos);
}

TEST(WatchReplicationTest, ALeaderThatLostItsStoreTakesTheNewestBack) {
  WatchStore leader("", 100), one("", 100), two("", 100);
  DirectReplicas replicas({&leader, &one, &two});
  WatchReplication replication(&leader, &replicas);
  ASSERT_TRUE(leader.Add(Spec(1000)).ok());
  replication.PushModel(kModel);
  Record(leader, replication, 1);
  replicas.down = {2};  // node 2 misses step 2
  Record(leader, replication, 2);
  replicas.down.clear();
  const std::string expected = Describe(leader);

  WatchStore restarted("", 100);
  replicas.Replace(0, &restarted);
  WatchReplication after(&restarted, &replicas);
  ASSERT_TRUE(after.Sync().ok());
  EXPECT_EQ(Describe(restarted), expected);  // node 1's, the newest
  EXPECT_EQ(Describe(two), expected);        // and node 2 caught up
  // Records go on from step 2 everywhere.
  Record(restarted, after, 3);
  EXPECT_EQ(Describe(one), Describe(restarted));
  EXPECT_EQ(Describe(two), Describe(restarted));
  EXPECT_NE(Describe(two).find("[3 "), std::string::npos);
}

TEST(WatchReplicationTest, ARemovalIsNotUndoneByAStaleCopy) {
  WatchStore leader("", 100), one("", 100), two("", 100);
  DirectReplicas replicas({&leader, &one, &two});
  WatchReplication replication(&leader, &replicas);
  ASSERT_TRUE(leader.Add(Spec(1000)).ok());
  replication.PushModel(kModel);
  Record(leader, replication, 1);
  replicas.down = {2};  // node 2 keeps the watch: it missed the removal
  ASSERT_TRUE(leader.Remove(kModel).ok());
  replication.PushModel(kModel);
  replicas.down.clear();

  WatchStore restarted("", 100);
  replicas.Replace(0, &restarted);
  WatchReplication after(&restarted, &replicas);
  ASSERT_TRUE(after.Sync().ok());
  EXPECT_EQ(Describe(restarted), "");
  EXPECT_EQ(Describe(two), "");
  // A watch added again later wins over the tombstone.
  ASSERT_TRUE(restarted.Add(Spec(2000)).ok());
  after.PushModel(kModel);
  Record(restarted, after, 7, 2000);
  EXPECT_EQ(Describe(two), Describe(restarted));
  EXPECT_NE(Describe(two).find("created 2000"), std::string::npos);
}

TEST(WatchReplicationTest, AWholeWatchTravelsInBoundedChunksAndPersists) {
  const std::string dir = absl::StrCat(
      std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR")
                                            : "/tmp",
      "/watch-replication-", getpid());
  WatchStore leader("", 100);
  ASSERT_TRUE(leader.Add(Spec(1000)).ok());
  for (int64_t step = 1; step <= 40; ++step) {
    ASSERT_TRUE(leader.Record(kModel, absl::FromUnixMillis(1000),
                              RecordsOf(step))
                    .ok());
  }
  const std::vector<WatchChunk> chunks = leader.Export(kModel, 2000);
  ASSERT_GT(chunks.size(), 4u);  // replace, several appends, commit
  EXPECT_EQ(chunks.front().kind, WatchChunk::Kind::kReplace);
  EXPECT_EQ(chunks.back().kind, WatchChunk::Kind::kCommit);
  for (size_t i = 1; i + 1 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].kind, WatchChunk::Kind::kAppend);
    EXPECT_LT(chunks[i].json.size(), 2000u + 1000u) << i;
  }
  {
    WatchStore follower(dir, 100);
    for (const WatchChunk& chunk : chunks) {
      // Not served until complete.
      EXPECT_EQ(Describe(follower), "");
      ASSERT_TRUE(follower.Apply(chunk).ok());
    }
    EXPECT_EQ(Describe(follower), Describe(leader));
  }
  WatchStore reloaded(dir, 100);
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(Describe(reloaded), Describe(leader));
  std::filesystem::remove_all(dir);
}

TEST(WatchReplicationTest, AMalformedChunkIsRefused) {
  WatchStore store("", 100);
  WatchChunk chunk;
  chunk.model = kModel;
  chunk.json = "{not json";
  EXPECT_TRUE(absl::IsInvalidArgument(store.Apply(chunk)));
  chunk.json = R"({"model": "m"})";  // no spec fields
  EXPECT_TRUE(absl::IsInvalidArgument(store.Apply(chunk)));
  chunk.model = "../../etc/x";
  EXPECT_TRUE(absl::IsInvalidArgument(store.Apply(chunk)));
  chunk.model = kModel;
  chunk.kind = WatchChunk::Kind::kRecord;
  chunk.json = R"({"histories": [{"param": "a"}]})";
  EXPECT_TRUE(absl::IsFailedPrecondition(store.Apply(chunk)));  // no watch
  ASSERT_TRUE(store.Add(Spec(1000)).ok());
  chunk.created_at = absl::FromUnixMillis(1000);
  EXPECT_TRUE(absl::IsInvalidArgument(store.Apply(chunk)));  // no "grad"
  chunk.previous_step = 5;
  chunk.json = R"({"histories": []})";
  EXPECT_TRUE(absl::IsFailedPrecondition(store.Apply(chunk)));  // not step 5
  EXPECT_EQ(store.List().size(), 1u);
  EXPECT_EQ(store.List()[0].last_step, std::nullopt);
}

}  // namespace
}  // namespace summon::server
