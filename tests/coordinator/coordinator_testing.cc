#include "tests/coordinator/coordinator_testing.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/coordinator/etcd_client.h"

namespace summon::tests {

std::unique_ptr<server::EtcdCoordinator> MakeCoordinator(
    int node, std::vector<std::string> endpoints, const std::string& cluster,
    absl::Duration ttl, absl::Duration margin, absl::Duration call_timeout) {
  server::EtcdCoordinator::Options options;
  options.etcd.endpoints = std::move(endpoints);
  options.etcd.call_timeout = call_timeout;
  options.cluster = cluster;
  options.node = node;
  options.address = absl::StrCat("node-", node, ":7000");
  options.lease_ttl = ttl;
  options.validity_margin = margin;
  options.watch_slice = absl::Milliseconds(200);
  return std::make_unique<server::EtcdCoordinator>(std::move(options));
}

absl::StatusOr<std::vector<int>> CandidatesInOrder(
    const std::vector<std::string>& endpoints, const std::string& cluster) {
  server::EtcdClient client({endpoints, absl::Seconds(2), nullptr});
  const std::string prefix = absl::StrCat("/summon/", cluster, "/election/");
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(server::PrefixEnd(prefix));
  request.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  request.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
  absl::StatusOr<etcdserverpb::RangeResponse> response = client.Range(request);
  if (!response.ok()) return response.status();
  std::vector<int> nodes;
  for (const mvccpb::KeyValue& kv : response->kvs()) {
    int node = -1;
    if (!absl::SimpleAtoi(kv.value(), &node)) {
      return absl::InternalError(absl::StrCat("election value ", kv.value()));
    }
    nodes.push_back(node);
  }
  return nodes;
}

LeadershipRecorder::LeadershipRecorder(
    std::vector<server::EtcdCoordinator*> coordinators)
    : coordinators_(std::move(coordinators)), records_(coordinators_.size()) {
  thread_ = std::thread([this] { Loop(); });
}

LeadershipRecorder::~LeadershipRecorder() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

LeadershipRecorder::Record LeadershipRecorder::Of(int index) const {
  absl::MutexLock lock(&mu_);
  return records_[index];
}

bool LeadershipRecorder::two_leaders_seen() const {
  absl::MutexLock lock(&mu_);
  return two_leaders_;
}

void LeadershipRecorder::Loop() {
  while (true) {
    std::vector<bool> leading;
    for (server::EtcdCoordinator* coordinator : coordinators_) {
      leading.push_back(coordinator->IsLeader());
    }
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    int leaders = 0;
    for (size_t i = 0; i < leading.size(); ++i) {
      Record& record = records_[i];
      if (leading[i]) {
        ++leaders;
        if (record.began == absl::InfiniteFuture()) record.began = now;
      } else if (record.began != absl::InfiniteFuture() &&
                 record.ended == absl::InfiniteFuture()) {
        record.ended = now;
      }
    }
    if (leaders > 1) two_leaders_ = true;
    mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(1));
  }
}

}  // namespace summon::tests
