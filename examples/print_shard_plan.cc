// Prints a model layout, how every rank shards it, and the gather plan of a
// session scope: the core library's view of a model, before any daemon runs.
//
//   print_shard_plan LAYOUT.json [NODES] [LOCAL_RANKS] [STRATEGY] [SCOPE]

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/scope.h"

namespace {

using summon::core::ModelSpec;

void PrintModel(const ModelSpec& model) {
  absl::PrintF("kind %s, strategy %s (effective %s), shard group size G=%d, "
               "world %d\n",
               summon::core::LayoutKindName(model.kind),
               summon::core::StrategyName(model.groups.declared),
               summon::core::StrategyName(model.groups.effective),
               model.groups.group_size, model.groups.topology.world_size());
  for (const summon::core::UnitSpec& unit : model.units) {
    const summon::core::FlatParamLayout& layout = unit.layout;
    absl::PrintF("\nunit '%s': %s, N=%d, chunk c=%d\n", unit.fqn,
                 summon::core::DTypeName(layout.dtype()),
                 layout.unpadded_numel(), layout.chunk_numel());
    for (const summon::core::FlatSegment& segment : layout.segments()) {
      if (segment.param_index < 0) {
        absl::PrintF("  [%5d, %5d)  padding\n", segment.start,
                     segment.start + segment.numel);
        continue;
      }
      const auto& param = layout.params()[segment.param_index];
      absl::PrintF("  [%5d, %5d)  %s %s\n", segment.start,
                   segment.start + segment.numel, param.fqn,
                   summon::core::ShapeToString(param.shape));
    }
    const bool fsdp2 = layout.kind() == summon::core::LayoutKind::kFsdp2;
    for (int position = 0; position < model.groups.group_size; ++position) {
      // FSDP2: the segments above are each shard's padded chunks, so a
      // position is described by the part of each parameter it holds.
      if (fsdp2) {
        absl::PrintF("  position %d holds:", position);
        for (size_t p = 0; p < layout.params().size(); ++p) {
          const int index = static_cast<int>(p);
          absl::PrintF(
              " %s%s of %s@%d", layout.params()[p].fqn,
              summon::core::ShapeToString(layout.LocalShape(index, position)),
              summon::core::ShapeToString(
                  layout.PaddedLocalShape(index, position)),
              layout.params()[p].flat_offset);
        }
        absl::PrintF("\n");
        continue;
      }
      absl::PrintF("  position %d owns flat [%d, %d):", position,
                   layout.RealBegin(position), layout.RealEnd(position));
      for (size_t p = 0; p < layout.params().size(); ++p) {
        const auto slice = layout.SliceOf(static_cast<int>(p), position);
        if (!slice.in_shard) continue;
        absl::PrintF(" %s[%d..%d]@%d", layout.params()[p].fqn,
                     slice.intra_start, slice.intra_end,
                     slice.offset_in_shard);
      }
      absl::PrintF("\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: print_shard_plan LAYOUT.json [NODES] [LOCAL_RANKS] "
                 "[STRATEGY] [SCOPE]\n";
    return 2;
  }
  std::ifstream file(argv[1]);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 2;
  }
  summon::core::Topology topology{argc > 2 ? std::atoi(argv[2]) : 1,
                                  argc > 3 ? std::atoi(argv[3]) : 4};
  std::optional<summon::core::Strategy> strategy;
  if (argc > 4) {
    auto parsed = summon::core::ParseStrategy(argv[4]);
    if (!parsed.ok()) {
      std::cerr << parsed.status() << "\n";
      return 3;
    }
    strategy = *parsed;
  }
  auto model = summon::core::ParseModelLayout(text.str(), topology, strategy);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 3;
  }
  PrintModel(*model);

  summon::core::ScopeRequest request;
  request.module_fqn = argc > 5 ? argv[5] : "layers.1";
  auto scope = summon::core::ResolveScope(*model, request);
  if (!scope.ok()) {
    std::cerr << scope.status() << "\n";
    return 5;
  }
  for (const std::string& warning : scope->warnings) {
    absl::PrintF("warning: %s\n", warning);
  }
  const auto buffer = summon::core::LayoutSessionBuffer(*model, *scope);
  auto plan = summon::core::PlanGather(*model, buffer,
                                       summon::core::Placement::kPerNode, 0);
  if (!plan.ok()) {
    std::cerr << plan.status() << "\n";
    return 3;
  }
  absl::PrintF(
      "\ngather plan for scope '%s' (one host copy per node), %d bytes per "
      "copy, %d bytes cross nodes:\n",
      request.module_fqn, buffer.total_bytes,
      summon::core::CrossNodeBytes(*model, plan->copies, plan->transfers));
  absl::PrintF("  %4s %5s %10s -> %4s %10s %8s\n", "rank", "unit", "shard_off",
               "copy", "buf_off", "bytes");
  for (const summon::core::Transfer& t : plan->transfers) {
    absl::PrintF("  %4d %5d %10d -> %4d %10d %8d\n", t.rank, t.unit,
                 t.shard_offset, t.copy, t.buffer_offset, t.bytes);
  }
  return 0;
}
