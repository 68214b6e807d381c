#ifndef SUMMON_TESTS_CLUSTER_CLUSTER_VALUES_H_
#define SUMMON_TESTS_CLUSTER_CLUSTER_VALUES_H_

// Expected values for the cluster tests, computed from the seeded init
// (docs/design.md#seeded-init) and the layout a daemon reports, never read back
// from a daemon.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "summon/v1/summon.pb.h"

namespace summon::tests {

// Root unit (an embedding with a tied head, a norm) and two block units,
// every unit split unevenly over 3 or 4 ranks: the cluster tests' model.
inline constexpr char kUnevenLayout[] =
    R"({"strategy": "FULL_SHARD", "use_orig_params": true,
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [9, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"},
      {"fqn": "norm.w", "shape": [6], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [5, 5], "dtype": "float32"},
      {"fqn": "layers.0.attn.b", "shape": [5], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [3, 7], "dtype": "float32"}]},
    {"fqn": "layers.1", "params": [
      {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";
inline constexpr uint64_t kSeed = 7;
inline constexpr uint64_t kGradSeed = 11;

// Raw little-endian elements of whole tensors, keyed by primary FQN.
using TensorBytes = std::map<std::string, std::string>;

// Elements [0, numel) of parameter `fqn` under the seeded init, as `dtype`
// (float16/bfloat16 round the float32 value to nearest even). Seeded
// gradients are the seeded init of "<fqn>.grad".
std::string SeededBytes(const std::string& fqn, int64_t numel, v1::DType dtype,
                        uint64_t seed = kSeed);
std::vector<float> SeededFloats(const std::string& fqn, int64_t numel,
                                uint64_t seed = kSeed);
// Every primary parameter of `model` under the seeded init, stored dtype.
TensorBytes SeededModel(const v1::Model& model, uint64_t seed = kSeed);
TensorBytes SeededGrads(const v1::Model& model, uint64_t seed = kGradSeed);

std::string FloatBytes(const std::vector<float>& values);
std::vector<float> BytesToFloats(const std::string& bytes);

// The primary parameters of `model` with their element counts, model order.
std::vector<std::pair<std::string, int64_t>> PrimaryParams(
    const v1::Model& model);

// The position in its shard group of the rank owning element `index` of
// parameter `fqn` (rank = position when the group spans the world).
int OwningPosition(const v1::Model& model, const std::string& fqn,
                   int64_t index);

// ShardChecksum.params (or .grads, where present) keyed by (rank, unit).
using ChecksumMap = std::map<std::pair<int, std::string>, uint64_t>;
ChecksumMap ParamChecksums(const v1::ModelChecksumResponse& response);
ChecksumMap GradChecksums(const v1::ModelChecksumResponse& response);
// What ModelChecksum must report when the full tensors of `model` (as
// DescribeModel returns it) hold `values`: every rank's shard rebuilt from
// the layout (position = rank mod G; flat or FSDP2's padded chunks),
// padding zero. `ranks` limits the ranks
// (gradients live on some only); empty: every rank of the world.
ChecksumMap ExpectedChecksums(const v1::Model& model, const TensorBytes& values,
                              const std::vector<int>& ranks = {});

// Session.bytes of one copy holding tensors of these byte sizes: the session
// buffer starts every tensor at a 64-byte boundary (core/plan.h).
int64_t SessionBufferBytes(const std::vector<int64_t>& tensor_bytes);

// Session option builders.
v1::SessionOptions ModuleScope(const std::string& fqn, bool recurse = true);
v1::SessionOptions ParamScope(const std::vector<std::string>& fqns);
v1::SessionOptions ReadOnly(v1::SessionOptions options = {});
v1::SessionOptions Rank0Only(int home_rank, v1::SessionOptions options = {});

}  // namespace summon::tests

#endif  // SUMMON_TESTS_CLUSTER_CLUSTER_VALUES_H_
