#ifndef SUMMON_TESTS_CLUSTER_CLUSTER_CALLS_H_
#define SUMMON_TESTS_CLUSTER_CLUSTER_CALLS_H_

// SummonClient calls that are expected to succeed: each adds a test failure
// naming the call and the status when it does not, and returns an empty
// value then, so a test goes on to report its other expectations.

#include <optional>
#include <string>
#include <vector>

#include "client/lib/summon_client.h"
#include "summon/v1/summon.pb.h"

namespace summon::tests {

// CreateModel with seeded parameters;
// `grad_ranks` set: seeded gradients (kGradSeed) on those ranks (empty: every
// rank).
v1::Model CreateSeeded(const client::SummonClient& node,
                       const std::string& name, const std::string& layout_json,
                       v1::ShardingStrategy strategy,
                       std::optional<std::vector<int32_t>> grad_ranks = {});
v1::Session OpenOk(const client::SummonClient& node, const std::string& model,
                   const v1::SessionOptions& options);
// The whole tensor's bytes as `dtype` (unspecified: the session's read
// dtype, else stored).
std::string ReadOk(const client::SummonClient& node, const std::string& session,
                   const std::string& fqn, bool grad = false,
                   v1::DType dtype = v1::DTYPE_UNSPECIFIED);
// Writes a whole tensor of the stored dtype `dtype`.
void WriteOk(const client::SummonClient& node, const std::string& session,
             const std::string& fqn, const std::string& bytes,
             v1::DType dtype = v1::DTYPE_FLOAT32, bool grad = false);
v1::CloseSessionResponse CloseOk(const client::SummonClient& node,
                                 const std::string& session);
v1::ModelChecksumResponse ChecksumOk(const client::SummonClient& node,
                                     const std::string& model);

}  // namespace summon::tests

#endif  // SUMMON_TESTS_CLUSTER_CLUSTER_CALLS_H_
