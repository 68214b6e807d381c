#include "server/service/cluster_generations.h"

#include <cstdint>
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "summon/v1/peer.grpc.pb.h"
#include "server/service/forwarding.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// Unit index by FQN, as NodeChecksum names units.
std::map<std::string, int> UnitsByFqn(const ModelEntry& model) {
  std::map<std::string, int> units;
  for (size_t u = 0; u < model.spec.units.size(); ++u) {
    units[model.spec.units[u].fqn] = static_cast<int>(u);
  }
  return units;
}

}  // namespace

absl::Status RebuildLeaderGenerations(Membership& membership,
                                      ModelRegistry& registry,
                                      SessionManager& sessions) {
  absl::Status result = absl::OkStatus();
  for (const std::shared_ptr<ModelEntry>& model : registry.List()) {
    std::vector<std::map<int, uint64_t>> held(membership.size());
    if (model->store != nullptr) {  // Not MISSING_SHARDS here.
      std::map<int, uint64_t>& own = held[membership.node_rank()];
      for (size_t u = 0; u < model->spec.units.size(); ++u) {
        own[static_cast<int>(u)] = model->store->Generation(static_cast<int>(u));
      }
    }
    const std::map<std::string, int> units = UnitsByFqn(*model);
    v1::NodeChecksumRequest request;
    request.set_model(model->name);
    request.set_epoch(membership.epoch());
    absl::Mutex mu;
    const std::vector<absl::Status> answers = OnFollowers(
        membership, [&](int node, v1::Peer::Stub& stub,
                        grpc::ClientContext& context) {
          v1::ModelChecksumResponse part;
          grpc::Status status = stub.NodeChecksum(&context, request, &part);
          if (!status.ok()) return status;
          absl::MutexLock lock(&mu);
          for (const v1::ShardChecksum& shard : part.shards()) {
            auto unit = units.find(shard.unit());
            if (unit == units.end()) continue;
            uint64_t& generation = held[node][unit->second];
            generation = std::max(generation, shard.generation());
          }
          return grpc::Status::OK;
        });
    for (const absl::Status& answer : answers) {
      if (!answer.ok()) {
        spdlog::warn("generations of model {} not read: {}", model->name,
                     answer.ToString());
      }
    }
    if (absl::Status adopted = sessions.AdoptGenerations(model->name, held);
        !adopted.ok() && !absl::IsNotFound(adopted) &&
        !absl::IsDeadlineExceeded(adopted)) {
      // DEADLINE_EXCEEDED: a node still takes them in the background.
      result = absl::UnavailableError(
          absl::StrCat("generations of model '", model->name,
                       "' not rebuilt: ", adopted.message()));
    }
  }
  return result;
}

}  // namespace summon::server
