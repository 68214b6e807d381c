// summonctl cluster status: the nodes, the leader, the epoch, each node up
// or down and the ranks it holds, as the node asked sees them.

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/summonctl_internal.h"

namespace summon::client {
namespace {

std::string RanksText(const v1::ClusterNode& node) {
  if (node.local_ranks() == 0) return "-";
  if (node.local_ranks() == 1) return absl::StrCat(node.first_rank());
  return absl::StrCat(node.first_rank(), "-",
                      node.first_rank() + node.local_ranks() - 1);
}

std::string ClusterStatusTable(const v1::ClusterStatus& status) {
  Table summary;
  summary.AddRow({"answered_by", absl::StrCat(status.answered_by())});
  summary.AddRow({"leader", absl::StrCat(status.leader())});
  summary.AddRow({"epoch", absl::StrCat(status.epoch())});
  summary.AddRow({"ready", status.ready() ? "true" : "false"});
  if (!status.detail().empty()) summary.AddRow({"detail", status.detail()});
  summary.AddRow({"models", status.models().empty()
                                ? "-"
                                : absl::StrJoin(status.models(), ",")});
  Table nodes({"NODE", "ADDRESS", "STATE", "LEADER", "RANKS"});
  for (const v1::ClusterNode& node : status.nodes()) {
    nodes.AddRow({absl::StrCat(node.node()),
                  node.address().empty() ? "-" : node.address(),
                  EnumLabel(node.state()), node.leader() ? "yes" : "no",
                  RanksText(node)});
  }
  return absl::StrCat(summary.ToString(), "\n", nodes.ToString());
}

}  // namespace

absl::Status ClusterStatus(const CommandContext& c) {
  return Print(c, c.client.GetClusterStatus(), &ClusterStatusTable);
}

}  // namespace summon::client
