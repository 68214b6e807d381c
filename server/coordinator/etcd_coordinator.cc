#include "server/coordinator/etcd_coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace summon::server {

namespace pb = ::etcdserverpb;

namespace {

constexpr char kEpochKey[] = "epoch";
constexpr char kMembersPrefix[] = "members/";
constexpr char kElectionPrefix[] = "election/";
// Between attempts while etcd cannot answer.
constexpr absl::Duration kRetryPause = absl::Milliseconds(100);

std::chrono::steady_clock::duration ToSteady(absl::Duration duration) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(duration));
}

void CompareCreate(pb::TxnRequest& txn, const std::string& key,
                   int64_t revision) {
  pb::Compare* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_target(pb::Compare::CREATE);
  compare->set_result(pb::Compare::EQUAL);
  compare->set_create_revision(revision);
}

void CompareMod(pb::TxnRequest& txn, const std::string& key, int64_t revision) {
  pb::Compare* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_target(pb::Compare::MOD);
  compare->set_result(pb::Compare::EQUAL);
  compare->set_mod_revision(revision);
}

void AddPut(pb::RequestOp* op, const std::string& key, absl::string_view value,
            int64_t lease) {
  pb::PutRequest* put = op->mutable_request_put();
  put->set_key(key);
  put->set_value(std::string(value));
  put->set_lease(lease);
}

void AddRange(pb::RequestOp* op, const std::string& key) {
  op->mutable_request_range()->set_key(key);
}

pb::RangeRequest PrefixRange(const std::string& prefix) {
  pb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixEnd(prefix));
  return request;
}

}  // namespace

EtcdCoordinator::EtcdCoordinator(Options options)
    : options_(std::move(options)),
      prefix_(absl::StrCat("/summon/", options_.cluster, "/")),
      client_(options_.etcd) {}

EtcdCoordinator::~EtcdCoordinator() { Stop(); }

std::string EtcdCoordinator::Key(absl::string_view relative) const {
  return absl::StrCat(prefix_, relative);
}

absl::Status EtcdCoordinator::Start() {
  if (options_.etcd.endpoints.empty()) {
    return absl::InvalidArgumentError("the etcd coordinator needs endpoints");
  }
  if (options_.cluster.empty()) {
    return absl::InvalidArgumentError("the etcd coordinator needs a cluster");
  }
  if (options_.validity_margin <= absl::ZeroDuration() ||
      options_.validity_margin >= options_.lease_ttl / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the validity margin (", absl::FormatDuration(options_.validity_margin),
        ") must be positive and under half the lease TTL (",
        absl::FormatDuration(options_.lease_ttl), ")"));
  }
  // A node etcd refuses stops here; an etcd that is down is waited for.
  const absl::Status refused = client_.CheckAccess(Key(kEpochKey));
  if (!refused.ok()) return refused;
  campaign_ = std::thread([this] { CampaignLoop(); });
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  return absl::OkStatus();
}

void EtcdCoordinator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  client_.CancelInFlight();
  if (campaign_.joinable()) campaign_.join();
  if (keepalive_.joinable()) keepalive_.join();
  int64_t lease = 0;
  {
    absl::MutexLock lock(&mu_);
    leading_ = false;
    if (!lease_lost_) lease = lease_;
  }
  // Resigning: revoking the lease deletes this node's member and election
  // keys at once, so the next candidate need not wait out the TTL.
  if (lease != 0) client_.LeaseRevoke(lease).IgnoreError();
}

void EtcdCoordinator::Pause(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), duration);
}

bool EtcdCoordinator::Running(int64_t lease) const {
  absl::MutexLock lock(&mu_);
  return !stopping_ && lease_ == lease && !lease_lost_;
}

bool EtcdCoordinator::ValidLocked() const {
  return leading_ && !lease_lost_ &&
         std::chrono::steady_clock::now() <
             confirmed_sent_ + ToSteady(ttl_ - options_.validity_margin);
}

bool EtcdCoordinator::IsLeader() const {
  absl::MutexLock lock(&mu_);
  return ValidLocked();
}

bool EtcdCoordinator::HeldWithoutQuorum() const {
  absl::MutexLock lock(&mu_);
  return leading_ && !lease_lost_ && quorum_lost_ && !ValidLocked();
}

absl::Duration EtcdCoordinator::LeadershipValidFor() const {
  absl::MutexLock lock(&mu_);
  if (!ValidLocked()) return absl::ZeroDuration();
  return absl::FromChrono(confirmed_sent_ +
                          ToSteady(ttl_ - options_.validity_margin) -
                          std::chrono::steady_clock::now());
}

int64_t EtcdCoordinator::lease() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

void EtcdCoordinator::PauseKeepalivesForTesting(bool paused) {
  absl::MutexLock lock(&mu_);
  paused_ = paused;
}

absl::StatusOr<uint64_t> EtcdCoordinator::LeaderEpoch() const {
  absl::MutexLock lock(&mu_);
  if (!ValidLocked()) {
    return absl::UnavailableError(
        absl::StrCat("node ", options_.node, " does not lead"));
  }
  return epoch_;
}

absl::StatusOr<uint64_t> EtcdCoordinator::NextEpoch() {
  int64_t lease = 0;
  std::string election_key;
  int64_t revision = 0;
  uint64_t previous = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!ValidLocked()) {
      return absl::UnavailableError(
          absl::StrCat("node ", options_.node, " does not lead"));
    }
    lease = lease_;
    election_key = election_key_;
    revision = election_revision_;
    previous = epoch_;
  }
  absl::StatusOr<uint64_t> epoch =
      ClaimEpoch(lease, election_key, revision, previous);
  if (!epoch.ok()) return epoch.status();
  absl::MutexLock lock(&mu_);
  if (!leading_ || lease_ != lease) {
    return absl::AbortedError(absl::StrCat(
        "node ", options_.node, " lost the leadership of epoch ", previous));
  }
  epoch_ = std::max(epoch_, *epoch);
  spdlog::info("coordinator: node {} begins epoch {}", options_.node, *epoch);
  return *epoch;
}

absl::Status EtcdCoordinator::AwaitLeadership(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!IsLeader()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("node ", options_.node, " did not lead within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

void EtcdCoordinator::CampaignLoop() {
  while (true) {
    const absl::Status ended = Session();
    {
      absl::MutexLock lock(&mu_);
      leading_ = false;
      if (stopping_) return;
      // This lease is done with, alive or not; it may still exist in etcd.
      if (lease_ != 0) abandoned_lease_ = lease_;
      lease_lost_ = true;
    }
    spdlog::warn("coordinator: node {} campaigns again: {}", options_.node,
                 ended.ToString());
    Pause(kRetryPause);
  }
}

absl::Status EtcdCoordinator::Session() {
  int64_t abandoned = 0;
  {
    absl::MutexLock lock(&mu_);
    abandoned = abandoned_lease_;
  }
  if (abandoned != 0) {
    const absl::Status revoked = client_.LeaseRevoke(abandoned);
    // NOT_FOUND: it expired meanwhile, as good as revoked.
    if (!revoked.ok() && !absl::IsNotFound(revoked)) return revoked;
    absl::MutexLock lock(&mu_);
    abandoned_lease_ = 0;
  }
  std::chrono::steady_clock::time_point sent = std::chrono::steady_clock::now();
  const int64_t ttl_s = std::max<int64_t>(
      1, absl::ToInt64Seconds(options_.lease_ttl + absl::Seconds(1) -
                              absl::Nanoseconds(1)));
  absl::StatusOr<pb::LeaseGrantResponse> grant = client_.LeaseGrant(ttl_s);
  if (!grant.ok()) return grant.status();
  if (!grant->error().empty() || grant->ttl() <= 0) {
    return absl::UnavailableError(
        absl::StrCat("etcd refused a lease: ", grant->error()));
  }
  const int64_t lease = grant->id();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("stopping");
    lease_ = lease;
    lease_lost_ = false;
    quorum_lost_ = false;
    confirmed_sent_ = sent;
    ttl_ = absl::Seconds(grant->ttl());
  }
  // The member record and the candidate key in one transaction, both under
  // the lease: a node that stops renewing leaves both.
  const std::string election_key =
      Key(absl::StrCat(kElectionPrefix, absl::Hex(lease)));
  pb::TxnRequest campaign;
  CompareCreate(campaign, election_key, 0);
  AddPut(campaign.add_success(),
         Key(absl::StrCat(kMembersPrefix, options_.node)), options_.address,
         lease);
  AddPut(campaign.add_success(), election_key, absl::StrCat(options_.node),
         lease);
  AddRange(campaign.add_failure(), election_key);
  absl::StatusOr<pb::TxnResponse> campaigned = client_.Txn(campaign);
  if (!campaigned.ok()) return campaigned.status();
  int64_t revision = campaigned->header().revision();
  if (!campaigned->succeeded()) {
    const pb::RangeResponse& existing =
        campaigned->responses(0).response_range();
    if (existing.kvs_size() == 0) return absl::AbortedError("campaign lost");
    revision = existing.kvs(0).create_revision();
  }
  if (!AwaitPredecessors(lease, revision)) {
    return absl::AbortedError("lease lost while waiting to lead");
  }
  absl::StatusOr<uint64_t> epoch =
      ClaimEpoch(lease, election_key, revision, /*after=*/0);
  if (!epoch.ok()) return epoch.status();
  {
    absl::MutexLock lock(&mu_);
    leading_ = true;
    epoch_ = *epoch;
    election_key_ = election_key;
    election_revision_ = revision;
  }
  spdlog::info("coordinator: node {} leads, epoch {}", options_.node, *epoch);
  HoldLeadership(lease, election_key, revision);
  return absl::AbortedError(absl::StrCat(
      "node ", options_.node, " lost the leadership of epoch ", *epoch));
}

bool EtcdCoordinator::AwaitPredecessors(int64_t lease, int64_t revision) {
  while (Running(lease)) {
    pb::RangeRequest predecessor = PrefixRange(Key(kElectionPrefix));
    predecessor.set_max_create_revision(revision - 1);
    predecessor.set_sort_target(pb::RangeRequest::CREATE);
    predecessor.set_sort_order(pb::RangeRequest::DESCEND);
    predecessor.set_limit(1);
    absl::StatusOr<pb::RangeResponse> found = client_.Range(predecessor);
    if (!found.ok()) {
      Pause(kRetryPause);
      continue;
    }
    if (found->kvs_size() == 0) return true;
    // Only the next older candidate is watched (no herd when a leader
    // goes); its deletion sends this one back to look again.
    absl::StatusOr<mvccpb::Event> deleted = client_.AwaitEvent(
        found->kvs(0).key(), found->header().revision() + 1,
        mvccpb::Event::DELETE, absl::Now() + options_.watch_slice);
    if (!deleted.ok() && !absl::IsDeadlineExceeded(deleted.status())) {
      Pause(kRetryPause);
    }
  }
  return false;
}

absl::StatusOr<uint64_t> EtcdCoordinator::ClaimEpoch(
    int64_t lease, const std::string& election_key, int64_t revision,
    uint64_t after) {
  while (Running(lease)) {
    pb::TxnRequest claim;
    CompareCreate(claim, election_key, revision);
    AddPut(claim.add_success(), Key(kEpochKey), election_key, /*lease=*/0);
    absl::StatusOr<pb::TxnResponse> claimed = client_.Txn(claim);
    if (claimed.ok()) {
      if (!claimed->succeeded()) {
        return absl::AbortedError("the election key was gone before the epoch");
      }
      return static_cast<uint64_t>(claimed->header().revision());
    }
    // The transaction may have applied without an answer: the epoch key
    // names this candidate then, and its mod-revision is the epoch.
    Pause(kRetryPause);
    absl::StatusOr<pb::RangeResponse> current = client_.Range([&] {
      pb::RangeRequest request;
      request.set_key(Key(kEpochKey));
      return request;
    }());
    if (current.ok() && current->kvs_size() == 1 &&
        current->kvs(0).value() == election_key &&
        static_cast<uint64_t>(current->kvs(0).mod_revision()) > after) {
      return static_cast<uint64_t>(current->kvs(0).mod_revision());
    }
  }
  return absl::AbortedError("lease lost before the epoch was written");
}

void EtcdCoordinator::HoldLeadership(int64_t lease,
                                     const std::string& election_key,
                                     int64_t revision) {
  while (Running(lease)) {
    absl::StatusOr<mvccpb::Event> deleted =
        client_.AwaitEvent(election_key, revision + 1, mvccpb::Event::DELETE,
                           absl::Now() + options_.watch_slice);
    if (deleted.ok()) {
      // Revoked or expired: whatever the keepalives said, this lease is gone.
      absl::MutexLock lock(&mu_);
      if (lease_ == lease) lease_lost_ = true;
      return;
    }
    if (!absl::IsDeadlineExceeded(deleted.status())) Pause(kRetryPause);
  }
}

void EtcdCoordinator::KeepAliveLoop() {
  while (true) {
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      // etcd's own client renews at a third of the TTL: two may be lost.
      const absl::Duration interval =
          ttl_ > absl::ZeroDuration() ? ttl_ / 3 : options_.lease_ttl / 3;
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval);
      if (stopping_) return;
      if (lease_ == 0 || lease_lost_ || paused_) {
        quorum_lost_ = quorum_lost_ && !paused_;
        // Beyond the TTL and the margin without a confirmed renewal: treat
        // the lease as gone and start a new session (leadership already
        // ended at TTL - margin).
        if (lease_ != 0 && !lease_lost_ &&
            std::chrono::steady_clock::now() >
                confirmed_sent_ + ToSteady(ttl_ + options_.validity_margin)) {
          lease_lost_ = true;
        }
        continue;
      }
      lease = lease_;
    }
    std::chrono::steady_clock::time_point sent;
    absl::StatusOr<pb::LeaseKeepAliveResponse> renewed =
        client_.KeepAliveOnce(lease, &sent);
    absl::MutexLock lock(&mu_);
    if (lease_ != lease || lease_lost_) continue;
    quorum_lost_ = !renewed.ok() && EtcdHasNoLeader(renewed.status());
    if (renewed.ok() && renewed->ttl() > 0) {
      confirmed_sent_ = std::max(confirmed_sent_, sent);
      ttl_ = absl::Seconds(renewed->ttl());
    } else if (renewed.ok()) {
      spdlog::warn("coordinator: node {}'s lease {:x} expired", options_.node,
                   lease);
      lease_lost_ = true;
    } else {
      spdlog::warn("coordinator: node {} keepalive: {}", options_.node,
                   renewed.status().ToString());
    }
    // Without a quorum etcd expires no lease: kept until etcd renews it or
    // says it expired.
    if (!quorum_lost_ &&
        std::chrono::steady_clock::now() >
            confirmed_sent_ + ToSteady(ttl_ + options_.validity_margin)) {
      lease_lost_ = true;
    }
  }
}

absl::Status EtcdCoordinator::AddFence(const Fence& fence,
                                       pb::TxnRequest& txn) {
  if (fence.epoch != 0) {
    CompareMod(txn, Key(kEpochKey), static_cast<int64_t>(fence.epoch));
  }
  std::string election_key;
  if (fence.leader) {
    absl::MutexLock lock(&mu_);
    if (!ValidLocked()) {
      return absl::UnavailableError(
          absl::StrCat("node ", options_.node, " does not lead"));
    }
    election_key = election_key_;
    CompareCreate(txn, election_key_, election_revision_);
  }
  // Should a compare fail, what the epoch and this node's election key are
  // now says which one did (FenceFailure).
  AddRange(txn.add_failure(), Key(kEpochKey));
  if (fence.leader) AddRange(txn.add_failure(), election_key);
  return absl::OkStatus();
}

absl::Status EtcdCoordinator::FenceFailure(const Fence& fence,
                                           const pb::TxnResponse& response,
                                           absl::string_view key) const {
  const pb::RangeResponse& epoch = response.responses(0).response_range();
  const int64_t current =
      epoch.kvs_size() > 0 ? epoch.kvs(0).mod_revision() : 0;
  if (fence.epoch != 0 && current != static_cast<int64_t>(fence.epoch)) {
    return absl::AbortedError(absl::StrCat("epoch ", fence.epoch,
                                           " was deposed: the cluster is at "
                                           "epoch ",
                                           current));
  }
  if (fence.leader) {
    const pb::RangeResponse& mine = response.responses(1).response_range();
    absl::MutexLock lock(&mu_);
    if (mine.kvs_size() == 0 ||
        mine.kvs(0).create_revision() != election_revision_) {
      return absl::AbortedError(
          absl::StrCat("node ", options_.node, " no longer leads"));
    }
  }
  return absl::AlreadyExistsError(absl::StrCat(key, " is already set"));
}

absl::Status EtcdCoordinator::Put(absl::string_view key,
                                  absl::string_view value, const Fence& fence,
                                  PutMode mode) {
  pb::TxnRequest txn;
  if (absl::Status fenced = AddFence(fence, txn); !fenced.ok()) return fenced;
  if (mode == PutMode::kCreate) CompareCreate(txn, Key(key), 0);
  AddPut(txn.add_success(), Key(key), value, /*lease=*/0);
  absl::StatusOr<pb::TxnResponse> response = client_.Txn(txn);
  if (!response.ok()) return response.status();
  if (response->succeeded()) return absl::OkStatus();
  absl::Status failed = FenceFailure(fence, *response, key);
  if (absl::IsAlreadyExists(failed)) {
    // A retried attempt may have found what its first attempt wrote.
    absl::StatusOr<std::optional<std::string>> existing = Get(key);
    if (existing.ok() && existing->has_value() && **existing == value) {
      return absl::OkStatus();
    }
  }
  return failed;
}

absl::Status EtcdCoordinator::Delete(absl::string_view key,
                                     const Fence& fence) {
  pb::TxnRequest txn;
  if (absl::Status fenced = AddFence(fence, txn); !fenced.ok()) return fenced;
  txn.add_success()->mutable_request_delete_range()->set_key(Key(key));
  absl::StatusOr<pb::TxnResponse> response = client_.Txn(txn);
  if (!response.ok()) return response.status();
  if (response->succeeded()) return absl::OkStatus();
  return FenceFailure(fence, *response, key);
}

absl::StatusOr<std::optional<std::string>> EtcdCoordinator::Get(
    absl::string_view key) {
  pb::RangeRequest request;
  request.set_key(Key(key));
  absl::StatusOr<pb::RangeResponse> response = client_.Range(request);
  if (!response.ok()) return response.status();
  if (response->kvs_size() == 0) return std::nullopt;
  return response->kvs(0).value();
}

absl::StatusOr<std::map<std::string, std::string>> EtcdCoordinator::List(
    absl::string_view prefix) {
  absl::StatusOr<pb::RangeResponse> response =
      client_.Range(PrefixRange(Key(prefix)));
  if (!response.ok()) return response.status();
  std::map<std::string, std::string> found;
  for (const mvccpb::KeyValue& kv : response->kvs()) {
    found.emplace(kv.key().substr(prefix_.size()), kv.value());
  }
  return found;
}

absl::StatusOr<std::vector<Coordinator::Member>> EtcdCoordinator::Members() {
  absl::StatusOr<std::map<std::string, std::string>> records =
      List(kMembersPrefix);
  if (!records.ok()) return records.status();
  std::vector<Member> members;
  for (const auto& [key, address] : *records) {
    Member member;
    if (!absl::SimpleAtoi(
            absl::string_view(key).substr(sizeof(kMembersPrefix) - 1),
            &member.node)) {
      continue;  // Not a record of ours.
    }
    member.address = address;
    members.push_back(std::move(member));
  }
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.node < b.node; });
  return members;
}

absl::StatusOr<Coordinator::Leadership> EtcdCoordinator::CurrentLeader() {
  // One transaction reads both, so the candidate and the epoch agree.
  pb::TxnRequest read;
  pb::RangeRequest* first = read.add_success()->mutable_request_range();
  *first = PrefixRange(Key(kElectionPrefix));
  first->set_sort_target(pb::RangeRequest::CREATE);
  first->set_sort_order(pb::RangeRequest::ASCEND);
  first->set_limit(1);
  AddRange(read.add_success(), Key(kEpochKey));
  absl::StatusOr<pb::TxnResponse> response = client_.Txn(read);
  if (!response.ok()) return response.status();
  const pb::RangeResponse& candidates = response->responses(0).response_range();
  const pb::RangeResponse& epoch = response->responses(1).response_range();
  if (candidates.kvs_size() == 0) {
    return absl::UnavailableError("electing a leader: no candidate");
  }
  const mvccpb::KeyValue& leader = candidates.kvs(0);
  if (epoch.kvs_size() == 0 || epoch.kvs(0).value() != leader.key()) {
    return absl::UnavailableError(
        "electing a leader: the next leader has not begun its epoch");
  }
  Leadership leadership;
  if (!absl::SimpleAtoi(leader.value(), &leadership.node)) {
    return absl::InternalError("an election key does not name a node");
  }
  leadership.epoch = static_cast<uint64_t>(epoch.kvs(0).mod_revision());
  return leadership;
}

absl::StatusOr<std::string> EtcdCoordinator::AwaitKey(absl::string_view key,
                                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string full = Key(key);
  while (true) {
    pb::RangeRequest request;
    request.set_key(full);
    absl::StatusOr<pb::RangeResponse> found = client_.Range(request);
    if (!found.ok()) return found.status();
    if (found->kvs_size() > 0) return found->kvs(0).value();
    absl::StatusOr<mvccpb::Event> put = client_.AwaitEvent(
        full, found->header().revision() + 1, mvccpb::Event::PUT, deadline);
    if (put.ok()) return put->kv().value();
    if (absl::IsOutOfRange(put.status())) continue;
    if (!absl::IsDeadlineExceeded(put.status())) return put.status();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          key, " was not set within ", absl::FormatDuration(timeout)));
    }
  }
}

}  // namespace summon::server
