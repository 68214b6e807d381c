#ifndef SUMMON_TESTS_COORDINATOR_COORDINATOR_TESTING_H_
#define SUMMON_TESTS_COORDINATOR_COORDINATOR_TESTING_H_

// What the etcd coordinator's tests share: coordinators with a short lease
// on a test's etcd, the election keys as etcd holds them, and a watcher
// that records when each coordinator's leadership began and ended.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/etcd_coordinator.h"

namespace summon::tests {

// etcd's smallest lease (it raises shorter ones to 2 s) and a margin under
// half of it: tests see expiries and step-downs within seconds.
inline constexpr absl::Duration kTestTtl = absl::Seconds(2);
inline constexpr absl::Duration kTestMargin = absl::Milliseconds(500);
inline constexpr absl::Duration kTestCallTimeout = absl::Seconds(1);

// `ttl`, `margin`, `call_timeout`: the test's values unless given.
std::unique_ptr<server::EtcdCoordinator> MakeCoordinator(
    int node, std::vector<std::string> endpoints, const std::string& cluster,
    absl::Duration ttl = kTestTtl, absl::Duration margin = kTestMargin,
    absl::Duration call_timeout = kTestCallTimeout);

// The nodes of the election keys of `cluster`, lowest create-revision
// first (read from etcd directly, not through a coordinator).
absl::StatusOr<std::vector<int>> CandidatesInOrder(
    const std::vector<std::string>& endpoints, const std::string& cluster);

// Polls IsLeader() of each coordinator every millisecond and records, per
// coordinator, the first time it was seen leading and the first time it was
// seen not leading after that, and whether two were ever seen leading at
// once.
class LeadershipRecorder {
 public:
  explicit LeadershipRecorder(
      std::vector<server::EtcdCoordinator*> coordinators);
  ~LeadershipRecorder();  // Stops polling.

  struct Record {
    absl::Time began = absl::InfiniteFuture();
    absl::Time ended = absl::InfiniteFuture();
  };
  Record Of(int index) const;
  bool two_leaders_seen() const;

 private:
  void Loop();

  const std::vector<server::EtcdCoordinator*> coordinators_;
  mutable absl::Mutex mu_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
  bool two_leaders_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_COORDINATOR_COORDINATOR_TESTING_H_
