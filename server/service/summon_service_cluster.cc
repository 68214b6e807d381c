// Summon.GetClusterStatus: the cluster as the node asked sees it, from its
// membership view. Never routed to the leader, so an operator can ask any
// node which one is down, even while the leader is.

#include <string>

#include "absl/strings/str_cat.h"
#include "server/service/summon_service.h"

namespace summon::server {
namespace {

v1::NodeState NodeStateToProto(Membership::NodeHealth health) {
  switch (health) {
    case Membership::NodeHealth::kUp:
      return v1::NODE_STATE_UP;
    case Membership::NodeHealth::kDown:
      return v1::NODE_STATE_DOWN;
    case Membership::NodeHealth::kUnknown:
      return v1::NODE_STATE_UNKNOWN;
  }
  return v1::NODE_STATE_UNSPECIFIED;
}

}  // namespace

grpc::Status SummonServiceImpl::GetClusterStatus(
    grpc::ServerContext* context, const v1::GetClusterStatusRequest* request,
    v1::ClusterStatus* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/GetClusterStatus", *request);
      !denied.ok()) {
    return denied;
  }
  // Every model spans every node's ranks, so any model's topology says how
  // many ranks a node holds; a cluster's membership knows it without one.
  int local_ranks = 0;
  for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
    response->add_models(model->name);
    local_ranks = model->spec.groups.topology.local_ranks;
  }
  if (cluster_ == nullptr) {
    response->set_ready(true);
    response->set_leader(0);  // a single node leads itself
    v1::ClusterNode* node = response->add_nodes();
    node->set_node(0);
    node->set_state(v1::NODE_STATE_UP);
    node->set_leader(true);
    node->set_local_ranks(local_ranks);
    return grpc::Status::OK;
  }
  local_ranks = cluster_->local_ranks();
  response->set_answered_by(cluster_->node_rank());
  response->set_leader(cluster_->leader());
  response->set_epoch(cluster_->epoch());
  const absl::Status ready = cluster_->CheckReady();
  response->set_ready(ready.ok());
  response->set_detail(std::string(ready.message()));
  for (const Membership::NodeView& view : cluster_->Nodes()) {
    v1::ClusterNode* node = response->add_nodes();
    node->set_node(view.node);
    node->set_address(view.address);
    node->set_state(NodeStateToProto(view.health));
    node->set_leader(view.node == cluster_->leader());
    node->set_first_rank(view.node * local_ranks);
    node->set_local_ranks(local_ranks);
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
