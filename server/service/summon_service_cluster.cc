// Summon.ClusterStatus: the cluster as the node asked sees it, for
// operators (SummonServiceImpl's source file for the cluster's view).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/service/proto_conversion.h"
#include "server/service/summon_service.h"

namespace summon::server {

grpc::Status SummonServiceImpl::ClusterStatus(
    grpc::ServerContext* context, const v1::ClusterStatusRequest* request,
    v1::ClusterStatusResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ClusterStatus", *request);
      !denied.ok()) {
    return denied;
  }
  // Never forwarded: the operator asks this node, which must answer while
  // other nodes (the leader among them) are down.
  const int self = cluster_ == nullptr ? 0 : cluster_->node_rank();
  const int size = cluster_ == nullptr ? 1 : cluster_->size();
  response->set_node_rank(self);
  response->set_leader(0);  // Node 0 leads.
  if (cluster_ != nullptr) {
    response->set_epoch(cluster_->epoch());
    const absl::Status ready = cluster_->CheckReady();
    response->set_ready(ready.ok());
    response->set_failure(std::string(ready.message()));
  } else {
    response->set_ready(true);
  }
  v1::NodeHealthRequest health;
  for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
    health.add_models(model->name);
  }
  NodeAnswers asked;
  if (cluster_ != nullptr) asked = AskOtherNodes(health);
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&node_addresses_mu_);
    addresses = node_addresses_;
  }
  for (int node = 0; node < size; ++node) {
    v1::NodeStatus* status = response->add_nodes();
    status->set_node(node);
    if (static_cast<size_t>(node) < addresses.size()) {
      status->set_address(addresses[node]);
    }
    status->set_leader(node == 0);  // Node 0 leads (docs/architecture.md).
    status->set_self(node == self);
    if (node == self) {
      status->set_up(true);
      for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
        std::string detail;
        v1::ModelOnNode* held = status->add_models();
        held->set_model(model->name);
        held->set_state(ModelStateToProto(HealthOf(*model, &detail)));
        held->set_detail(detail);
      }
      continue;
    }
    const grpc::Status& result = asked.results[node];
    status->set_up(result.ok());
    if (!result.ok()) {
      status->set_down_reason(result.error_message());
      continue;
    }
    for (const v1::NodeModelHealth& model : asked.answers[node].models()) {
      v1::ModelOnNode* held = status->add_models();
      held->set_model(model.model());
      held->set_state(model.state());
      held->set_detail(model.detail());
    }
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
