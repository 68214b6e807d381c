// The simulated cluster of the seed checklist tests
// (docs/design.md#the-seed-checklist): every rank's shards in memory, each
// rank filling only its owned slices with the seeded init and padding with
// FSDP's marker 42; the core's plans gather them into session copies and write
// them back. Expected shard contents come from FSDP's definition (group
// position r holds flat elements [r*c, (r+1)*c)), not from SliceOf, so the
// checks do not share the intersection code the plans are built on.

#ifndef SUMMON_CORE_TESTING_SEED_CHECKLIST_HARNESS_H_
#define SUMMON_CORE_TESTING_SEED_CHECKLIST_HARNESS_H_

#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/scope.h"
#include "core/seeded_init.h"
#include "core/session_rules.h"
#include "gtest/gtest.h"

namespace summon::core::seed_checklist {

inline constexpr uint64_t kSeed = 7;
inline constexpr uint64_t kGradSeed = 8;  // Gradients: a second seeded stream.
inline constexpr float kPadding = 42.0f;  // FSDP's padding marker.
inline constexpr int kOuterUnit = 0;
inline constexpr int kInnerUnit = 1;
inline constexpr Strategy kAllStrategies[] = {
    Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard,
    Strategy::kHybridShard, Strategy::kHybridShardZero2};

inline ScopeRequest WholeModel() { return {"", true, {}}; }

inline float Seeded(absl::string_view fqn, int64_t index,
                    uint64_t seed = kSeed) {
  return static_cast<float>(SeededValue(fqn, seed, index));
}

// Layout JSON. All parameters are float32; a float16 compute dtype (FSDP's
// mixed precision) only changes the alignment padding.
inline std::string Param(absl::string_view fqn, absl::string_view shape) {
  return absl::StrCat(R"({"fqn": ")", fqn, R"(", "shape": [)", shape,
                      R"(], "dtype": "float32"})");
}
inline std::string Unit(absl::string_view fqn,
                        std::initializer_list<std::string> params) {
  return absl::StrCat(R"({"fqn": ")", fqn, R"(", "params": [)",
                      absl::StrJoin(params, ", "), "]}");
}
inline std::string Layout(std::initializer_list<std::string> units,
                          bool orig = true, bool fp16 = false) {
  return absl::StrCat(R"({"use_orig_params": )", orig ? "true" : "false",
                      fp16 ? R"(, "compute_dtype": "float16")" : "",
                      R"(, "units": [)", absl::StrJoin(units, ", "), "]}");
}

// Sequential(FSDP(Linear(5,5,bias=False)), Linear(5,3,bias=False)) wrapped in
// FSDP: the outer (root) unit holds "1.weight", the inner unit "0.weight".
inline std::string NestedLinears(bool orig = true, bool fp16 = false) {
  return Layout({Unit("", {Param("1.weight", "3, 5")}),
                 Unit("0", {Param("0.weight", "5, 5")})},
                orig, fp16);
}

// Linear(5,7) as the root unit: weight 35 | pad 1 | bias 7 | pad 1.
std::string Linear5x7() {
  return Layout({Unit("", {Param("weight", "7, 5"), Param("bias", "7")})});
}

// What FSDP's definition puts at element k of position r's shard.
struct FlatElement {
  const FlatParamEntry* param = nullptr;  // Null: padding of either kind.
  int64_t index = 0;                      // Row-major element of `param`.
};

inline FlatElement ElementAt(const FlatParamLayout& layout, int position,
                             int64_t k) {
  const int64_t flat = position * layout.chunk_numel() + k;
  for (const FlatParamEntry& param : layout.params()) {
    if (flat >= param.flat_offset && flat < param.flat_offset + param.numel) {
      return {&param, flat - param.flat_offset};
    }
  }
  return {};
}

// The group position owning element `index` of the parameter at `location`.
inline int OwnerPosition(const ModelSpec& model, const ParamLocation& location,
                         int64_t index) {
  return static_cast<int>((model.Param(location).flat_offset + index) /
                          model.units[location.unit].layout.chunk_numel());
}

// Seeded init in parameters, 42 in padding: a shard nobody touched.
inline float Unchanged(const FlatElement& element, uint64_t seed = kSeed) {
  return element.param ? Seeded(element.param->fqn, element.index, seed)
                       : kPadding;
}

// Every rank's shard of every unit, as its owner fills it.
class ShardStores {
 public:
  using Expected = std::function<float(int rank, int unit, const FlatElement&)>;

  ShardStores(const ModelSpec& model, uint64_t seed) : model_(&model) {
    for (int rank = 0; rank < model.groups.topology.world_size(); ++rank) {
      for (size_t u = 0; u < model.units.size(); ++u) {
        const FlatParamLayout& layout = model.units[u].layout;
        std::vector<float>& shard = shards_[{rank, static_cast<int>(u)}];
        shard.assign(layout.chunk_numel(), kPadding);
        for (size_t p = 0; p < layout.params().size(); ++p) {
          const ShardSlice slice = layout.SliceOf(
              static_cast<int>(p), model.groups.PositionOf(rank));
          if (!slice.in_shard) continue;
          EXPECT_TRUE(FillSeeded(layout.params()[p].fqn, seed, DType::kFloat32,
                                 slice.intra_start, slice.numel_in_shard,
                                 shard.data() + slice.offset_in_shard)
                          .ok());
        }
      }
    }
  }

  std::vector<float>& Shard(int rank, int unit) {
    return shards_.at({rank, unit});
  }
  const std::map<std::pair<int, int>, std::vector<float>>& all() const {
    return shards_;
  }
  ShardAddress Address() {
    return [this](int rank, int unit) {
      return reinterpret_cast<uint8_t*>(Shard(rank, unit).data());
    };
  }

  // Stops at the first element that differs from `expected`, naming it.
  void Expect(const Expected& expected) const {
    for (const auto& [key, shard] : shards_) {
      const auto [rank, unit] = key;
      for (size_t k = 0; k < shard.size(); ++k) {
        const FlatElement e = ElementAt(model_->units[unit].layout,
                                        model_->groups.PositionOf(rank), k);
        ASSERT_EQ(shard[k], expected(rank, unit, e))
            << "rank " << rank << " unit '" << model_->units[unit].fqn
            << "' shard element " << k << " = "
            << (e.param ? e.param->fqn : "padding") << "[" << e.index << "]";
      }
    }
  }

 private:
  const ModelSpec* model_;
  std::map<std::pair<int, int>, std::vector<float>> shards_;
};

inline ModelSpec ParseOrDie(const std::string& json, const Topology& topology,
                            std::optional<Strategy> strategy) {
  absl::StatusOr<ModelSpec> model = ParseModelLayout(json, topology, strategy);
  EXPECT_TRUE(model.ok()) << model.status() << "\n" << json;
  return model.value_or(ModelSpec());
}

// A model on simulated ranks: its parameter and gradient shard stores.
struct Cluster {
  Cluster(const std::string& json, const Topology& topology,
          std::optional<Strategy> strategy = std::nullopt)
      : model(ParseOrDie(json, topology, strategy)),
        params(model, kSeed),
        grads(model, kGradSeed) {}
  Cluster(const Cluster&) = delete;  // The stores point at `model`.

  const ModelSpec model;
  ShardStores params;
  ShardStores grads;
};

using Copies = std::vector<std::vector<float>>;  // One buffer per copy.
using TensorValue = std::function<float(const SessionTensor&, int64_t i)>;

inline float SeededParam(const SessionTensor& t, int64_t i) {
  return Seeded(t.fqn, i);
}
inline float SeededGrad(const SessionTensor& t, int64_t i) {
  return Seeded(t.fqn, i, kGradSeed);
}
inline TensorValue Constant(float value) {
  return [value](const SessionTensor&, int64_t) { return value; };
}

inline CopyAddress AddressOf(Copies& copies) {
  return
      [&copies](int c) { return reinterpret_cast<uint8_t*>(copies[c].data()); };
}

struct SimulatedSession {
  Scope scope;
  SessionBufferLayout buffer;
  GatherPlan plan;
  Copies params;
  Copies grads;

  static size_t Index(const SessionTensor& t, int64_t i) {
    return t.buffer_offset / sizeof(float) + i;
  }
  // A client's write: applied to every physical copy.
  void Set(Copies& copies, const TensorValue& value) const {
    for (std::vector<float>& copy : copies) {
      for (const SessionTensor& t : buffer.tensors) {
        for (int64_t i = 0; i < t.numel; ++i) copy[Index(t, i)] = value(t, i);
      }
    }
  }
  // Stops at the first element of any copy that differs from `expected`.
  void Expect(const Copies& copies, const TensorValue& expected) const {
    for (size_t c = 0; c < copies.size(); ++c) {
      for (const SessionTensor& t : buffer.tensors) {
        for (int64_t i = 0; i < t.numel; ++i) {
          ASSERT_EQ(copies[c][Index(t, i)], expected(t, i))
              << "copy " << c << " " << t.fqn << "[" << i << "]";
        }
      }
    }
  }
  Copies Gather(const std::vector<Transfer>& transfers,
                ShardStores& stores) const {
    Copies copies(plan.copies.size(),
                  std::vector<float>(buffer.total_bytes / sizeof(float)));
    ExecuteGather(transfers, stores.Address(), AddressOf(copies));
    return copies;
  }
};

// An open as every node runs its part: resolve the scope, lay out the buffer,
// plan and run the gather; grads (with_grads) use the same plan.
inline SimulatedSession Open(Cluster& cluster,
                             const ScopeRequest& request = WholeModel(),
                             Placement placement = Placement::kEveryRank,
                             int home_rank = 0) {
  SimulatedSession session;
  session.scope = ResolveScope(cluster.model, request).value();
  session.buffer = LayoutSessionBuffer(cluster.model, session.scope);
  session.plan =
      PlanGather(cluster.model, session.buffer, placement, home_rank).value();
  session.params = session.Gather(session.plan.transfers, cluster.params);
  session.grads = session.Gather(session.plan.transfers, cluster.grads);
  return session;
}

// Without writeback nothing runs: the copies are private memory (no aliasing,
// NO_SHARD included) and are dropped.
inline void Close(Cluster& cluster, SimulatedSession& session, bool writeback) {
  if (!writeback) return;
  const std::vector<Transfer> transfers =
      PlanWriteback(cluster.model, session.buffer, session.plan).transfers;
  ExecuteWriteback(transfers, cluster.params.Address(),
                   AddressOf(session.params));
  ExecuteWriteback(transfers, cluster.grads.Address(),
                   AddressOf(session.grads));
}

// A trainer writing its own (orig-params: 1-D owned) slice of `fqn` outside
// a session: element i becomes value(i).
inline void OverwriteOwnedSlice(const ModelSpec& model, ShardStores& stores,
                                int rank, absl::string_view fqn,
                                const std::function<float(int64_t)>& value) {
  const ParamLocation at = model.FindParam(fqn).value();
  const ShardSlice slice = model.units[at.unit].layout.SliceOf(
      at.param, model.groups.PositionOf(rank));
  for (int64_t k = 0; k < slice.numel_in_shard; ++k) {
    stores.Shard(rank, at.unit)[slice.offset_in_shard + k] =
        value(slice.intra_start + k);
  }
}

inline ModelRuntimeState RuntimeStateOf(const ModelSpec& model,
                                        TrainingPhase phase) {
  ModelRuntimeState state{
      "nested",
      std::vector<TrainingPhase>(model.groups.topology.world_size(), phase),
      {}};
  for (const UnitSpec& unit : model.units) {
    state.units.push_back({unit.fqn, 0, std::nullopt, {}});
  }
  return state;
}

// The units of `request` and every rank holding a slice of them.
inline OpenRequest OpenRequestFor(const ModelSpec& model,
                                  const ScopeRequest& request, bool writable) {
  const Scope scope = ResolveScope(model, request).value();
  const SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  const GatherPlan gather =
      PlanGather(model, buffer, Placement::kEveryRank, 0).value();
  OpenRequest open{scope.units, {}, writable};
  for (const Transfer& t : PlanWriteback(model, buffer, gather).transfers) {
    if (open.ranks.empty() || open.ranks.back() != t.rank) {
      open.ranks.push_back(t.rank);
    }
  }
  return open;
}

}  // namespace summon::core::seed_checklist

#endif  // SUMMON_CORE_TESTING_SEED_CHECKLIST_HARNESS_H_
