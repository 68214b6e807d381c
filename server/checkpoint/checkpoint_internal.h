#ifndef SUMMON_SERVER_CHECKPOINT_CHECKPOINT_INTERNAL_H_
#define SUMMON_SERVER_CHECKPOINT_CHECKPOINT_INTERNAL_H_

// What the two halves of checkpoint.h share, checkpoint_load.cc and
// checkpoint_save.cc: the check that the ranks they are given lie in the
// model's world. Kept out of checkpoint.h because no caller needs it.

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/model_spec.h"

namespace summon::server::checkpoint_internal {

// INVALID_ARGUMENT naming the first of `ranks` outside the model's world.
inline absl::Status CheckRanks(const core::ModelSpec& model,
                               const std::vector<int>& ranks) {
  for (int rank : ranks) {
    if (model.groups.PositionOf(rank) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is outside the world of ",
                       model.groups.topology.world_size(), " ranks"));
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::server::checkpoint_internal

#endif  // SUMMON_SERVER_CHECKPOINT_CHECKPOINT_INTERNAL_H_
