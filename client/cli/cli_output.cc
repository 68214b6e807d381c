#include "client/cli/cli_output.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/cli_values.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace summon::client {
namespace {

template <typename Dims>
std::string ShapeText(const Dims& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string BoolText(bool value) { return value ? "true" : "false"; }

std::string TimeText(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// Unit FQNs are "" for the root unit, which a table cannot show as such.
std::string UnitText(const std::string& unit) {
  return unit.empty() ? "<root>" : unit;
}

std::string ScopeText(const v1::SessionOptions& options) {
  if (options.has_params()) {
    return absl::StrCat("params ", absl::StrJoin(options.params().fqns(), ","));
  }
  const v1::ModuleScope& module = options.module();
  const bool recurse = !module.has_recurse() || module.recurse();
  return absl::StrCat(UnitText(module.fqn()), recurse ? "" : " (no recurse)");
}

std::string GenerationsTable(
    const google::protobuf::RepeatedPtrField<v1::UnitGeneration>& units) {
  Table table({"UNIT", "GENERATION"});
  for (const v1::UnitGeneration& unit : units) {
    table.AddRow({UnitText(unit.unit()), absl::StrCat(unit.generation())});
  }
  return table.ToString();
}

}  // namespace

std::vector<std::string> TensorInfoCells(const v1::TensorInfo& info) {
  return {info.fqn(), EnumLabel(info.dtype()), ShapeText(info.shape()),
          absl::StrCat(info.numel())};
}

Table::Table(std::vector<std::string> header) {
  if (!header.empty()) rows_.push_back(std::move(header));
}

void Table::AddRow(std::vector<std::string> cells) {
  rows_.push_back(std::move(cells));
}

std::string Table::ToString() const {
  std::vector<size_t> widths;
  for (const std::vector<std::string>& row : rows_) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string text;
  for (const std::vector<std::string>& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) {
        line.append(widths[i] - row[i].size() + 2, ' ');
      }
    }
    absl::StrAppend(&text, line, "\n");
  }
  return text;
}

namespace {

void AppendYaml(const nlohmann::ordered_json& value, int indent,
                std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      const bool nested =
          (item.is_object() || item.is_array()) && !item.empty();
      absl::StrAppend(&out, pad, nlohmann::json(key).dump(), ":");
      if (nested) {
        out += "\n";
        AppendYaml(item, indent + 2, out);
      } else {
        absl::StrAppend(&out, " ", item.dump(), "\n");
      }
    }
  } else if (value.is_array()) {
    for (const auto& item : value) {
      const bool nested =
          (item.is_object() || item.is_array()) && !item.empty();
      absl::StrAppend(&out, pad, "-");
      if (nested) {
        out += "\n";
        AppendYaml(item, indent + 2, out);
      } else {
        absl::StrAppend(&out, " ", item.dump(), "\n");
      }
    }
  } else {
    absl::StrAppend(&out, pad, value.dump(), "\n");
  }
}

}  // namespace

std::string JsonToYaml(const std::string& json) {
  const nlohmann::ordered_json value =
      nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return json;
  if ((value.is_object() || value.is_array()) && value.empty()) {
    return value.dump() + "\n";
  }
  std::string yaml;
  AppendYaml(value, 0, yaml);
  return yaml;
}

std::string ToYaml(const google::protobuf::Message& message) {
  return JsonToYaml(ToJson(message));
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  // Only messages with unresolvable Any fields fail; summon.v1 has none.
  if (!status.ok())
    return absl::StrCat("{\"error\": \"", status.ToString(), "\"}\n");
  if (json.empty() || json.back() != '\n') json.push_back('\n');
  return json;
}

std::string ModelListTable(const v1::ListModelsResponse& response) {
  Table table({"NAME", "STATE", "STRATEGY", "WORLD", "UNITS", "PARAMS", "NUMEL",
               "SESSIONS"});
  std::string details;
  for (const v1::ModelSummary& model : response.models()) {
    table.AddRow(
        {model.name(), EnumLabel(model.state()), EnumLabel(model.strategy()),
         absl::StrCat(model.world_size()), absl::StrCat(model.unit_count()),
         absl::StrCat(model.param_count()), absl::StrCat(model.numel()),
         absl::StrCat(model.open_sessions())});
    if (!model.state_detail().empty()) {
      absl::StrAppend(&details, model.name(), ": ", model.state_detail(), "\n");
    }
  }
  return table.ToString() + details;
}

// FSDP2: what each position of a shard group holds of `param`, as rows of
// its shard dim ("3,2" for 5 rows over G = 2; torch.chunk's split), and the
// padded chunk's shape every position stores.
std::vector<std::string> Fsdp2ParamCells(const v1::Parameter& param,
                                         int group_size) {
  const auto& shape = param.info().shape();
  const int dim = param.shard_dim();
  if (group_size < 1 || dim < 0 || dim >= shape.size()) return {"-", "-", "-"};
  const int64_t size = shape[dim];
  const int64_t rows = (size + group_size - 1) / group_size;
  std::vector<std::string> split;
  for (int position = 0; position < group_size; ++position) {
    split.push_back(absl::StrCat(
        std::clamp<int64_t>(size - position * rows, 0, rows)));
  }
  std::vector<int64_t> padded(shape.begin(), shape.end());
  padded[dim] = rows;
  return {absl::StrCat(dim), ShapeText(padded), absl::StrJoin(split, ",")};
}

std::string ModelTable(const v1::Model& model) {
  const bool fsdp2 = model.layout_kind() == v1::LAYOUT_KIND_FSDP2;
  Table summary;
  summary.AddRow({"model", model.name()});
  summary.AddRow({"state", EnumLabel(model.state())});
  if (!model.state_detail().empty()) {
    summary.AddRow({"state_detail", model.state_detail()});
  }
  summary.AddRow({"strategy", EnumLabel(model.strategy())});
  summary.AddRow({"effective_strategy", EnumLabel(model.effective_strategy())});
  if (fsdp2) {
    summary.AddRow({"layout_kind", "fsdp2"});
  } else {
    summary.AddRow({"use_orig_params", BoolText(model.use_orig_params())});
  }
  summary.AddRow(
      {"world", absl::StrCat(model.nodes(), " nodes x ", model.local_ranks(),
                             " local ranks = ", model.world_size())});
  summary.AddRow({"group_size", absl::StrCat(model.group_size())});

  Table units({"UNIT", "PARENT", "DTYPE", "PARAMS", "NUMEL", "CHUNK",
               "GENERATION", "EXTERNAL_WRITES"});
  Table params(fsdp2 ? std::vector<std::string>{"PARAM", "UNIT", "DTYPE",
                                                "SHAPE", "SHARD_DIM",
                                                "PADDED_CHUNK", "CHUNK_ROWS",
                                                "SHARD_OFFSET", "ALIASES"}
                     : std::vector<std::string>{"PARAM", "UNIT", "DTYPE",
                                                "SHAPE", "FLAT_OFFSET",
                                                "ALIASES"});
  for (const v1::Unit& unit : model.units()) {
    units.AddRow({UnitText(unit.fqn()),
                  unit.has_parent() ? UnitText(unit.parent()) : "-",
                  EnumLabel(unit.dtype()), absl::StrCat(unit.params_size()),
                  absl::StrCat(unit.unpadded_numel()),
                  absl::StrCat(unit.chunk_numel()),
                  absl::StrCat(unit.generation()),
                  absl::StrCat(unit.external_writes())});
    for (const v1::Parameter& param : unit.params()) {
      std::vector<std::string> row = {
          param.info().fqn(), UnitText(unit.fqn()),
          EnumLabel(param.info().dtype()), ShapeText(param.info().shape())};
      if (fsdp2) {
        for (std::string& cell : Fsdp2ParamCells(param, model.group_size())) {
          row.push_back(std::move(cell));
        }
      }
      row.push_back(absl::StrCat(param.flat_offset()));
      row.push_back(param.aliases().empty()
                        ? "-"
                        : absl::StrJoin(param.aliases(), ","));
      params.AddRow(row);
    }
  }
  Table ranks({"RANK", "PHASE", "STEP", "GRADS", "TRAINER", "LAST_EVENT"});
  for (const v1::RankState& rank : model.ranks()) {
    ranks.AddRow(
        {absl::StrCat(rank.rank()), EnumLabel(rank.phase()),
         rank.has_step() ? absl::StrCat(rank.step()) : "-",
         BoolText(rank.has_grads()),
         rank.trainer_incarnation().empty() ? "-" : rank.trainer_incarnation(),
         rank.last_event().empty() ? "-" : rank.last_event()});
  }
  return absl::StrCat(summary.ToString(), "\n", units.ToString(), "\n",
                      params.ToString(), "\n", ranks.ToString());
}

std::string LoadModelTable(const v1::LoadModelResponse& response) {
  return absl::StrCat(ModelTable(response.model()), "\nbytes_read  ",
                      response.bytes_read(), "\n");
}

std::string SaveModelTable(const v1::SaveModelResponse& response) {
  Table table({"FILE"});
  for (const std::string& file : response.files()) table.AddRow({file});
  return absl::StrCat(table.ToString(), "\nbytes_written  ",
                      response.bytes_written(), "\n");
}

std::string DeleteModelTable(const v1::DeleteModelResponse&) {
  return "deleted\n";
}

std::string ChecksumTable(const v1::ModelChecksumResponse& response) {
  Table table({"RANK", "UNIT", "PARAMS", "GRADS", "GENERATION"});
  for (const v1::ShardChecksum& shard : response.shards()) {
    table.AddRow({absl::StrCat(shard.rank()), UnitText(shard.unit()),
                  absl::StrCat(absl::Hex(shard.params(), absl::kZeroPad16)),
                  shard.has_grads()
                      ? absl::StrCat(absl::Hex(shard.grads(), absl::kZeroPad16))
                      : "-",
                  absl::StrCat(shard.generation())});
  }
  return table.ToString();
}

std::string SessionTable(const v1::Session& session) {
  const v1::SessionOptions& options = session.options();
  Table summary;
  summary.AddRow({"id", session.id()});
  summary.AddRow({"model", session.model()});
  summary.AddRow({"owner", session.owner()});
  summary.AddRow({"state", EnumLabel(session.state())});
  summary.AddRow({"scope", ScopeText(options)});
  summary.AddRow({"writeback", BoolText(options.writeback())});
  summary.AddRow({"rank0_only", options.rank0_only()
                                    ? absl::StrCat("true (home rank ",
                                                   options.home_rank(), ")")
                                    : "false"});
  summary.AddRow({"offload_to_cpu", BoolText(options.offload_to_cpu())});
  summary.AddRow({"with_grads", BoolText(options.with_grads())});
  summary.AddRow({"read_dtype", options.read_dtype() == v1::DTYPE_UNSPECIFIED
                                    ? "stored"
                                    : EnumLabel(options.read_dtype())});
  summary.AddRow({"lease_seconds", absl::StrCat(options.lease_seconds())});
  summary.AddRow({"created", TimeText(session.created_at_unix_ms())});
  summary.AddRow({"expires", TimeText(session.expires_at_unix_ms())});
  summary.AddRow({"bytes", absl::StrCat(session.bytes())});
  summary.AddRow({"shared_gather", BoolText(session.shared_gather())});
  for (const std::string& warning : session.warnings()) {
    summary.AddRow({"warning", warning});
  }
  Table tensors({"KIND", "FQN", "DTYPE", "SHAPE", "NUMEL"});
  for (const auto& [kind, infos] : {std::make_pair("param", &session.params()),
                                    std::make_pair("grad", &session.grads())}) {
    for (const v1::TensorInfo& info : *infos) {
      std::vector<std::string> row = TensorInfoCells(info);
      row.insert(row.begin(), kind);
      tensors.AddRow(std::move(row));
    }
  }
  return absl::StrCat(summary.ToString(), "\n", tensors.ToString(), "\n",
                      GenerationsTable(session.gathered_generations()));
}

std::string SessionListTable(const v1::ListSessionsResponse& response) {
  Table table({"ID", "MODEL", "OWNER", "STATE", "SCOPE", "WRITEBACK", "EXPIRES",
               "BYTES"});
  for (const v1::Session& session : response.sessions()) {
    table.AddRow({session.id(), session.model(), session.owner(),
                  EnumLabel(session.state()), ScopeText(session.options()),
                  BoolText(session.options().writeback()),
                  TimeText(session.expires_at_unix_ms()),
                  absl::StrCat(session.bytes())});
  }
  return table.ToString();
}

// Whole minutes above one, seconds below: an operator's glance, and a
// listing taken twice a second apart reads the same.
std::string LeaseLeftText(int64_t expires_unix_ms, int64_t now_unix_ms) {
  if (expires_unix_ms == 0) return "-";
  const int64_t left_s = std::max<int64_t>(0, expires_unix_ms - now_unix_ms) /
                         1000;
  if (left_s >= 60) return absl::StrCat(left_s / 60, "m");
  return absl::StrCat(left_s, "s");
}

std::string SessionHoldersTable(const v1::ListSessionsResponse& response,
                                int64_t now_unix_ms) {
  Table table({"ID", "MODEL", "OWNER", "SINCE", "LEASE_LEFT", "STATE",
               "SCOPE", "BYTES"});
  for (const v1::Session& session : response.sessions()) {
    table.AddRow({session.id(), session.model(), session.owner(),
                  TimeText(session.created_at_unix_ms()),
                  LeaseLeftText(session.expires_at_unix_ms(), now_unix_ms),
                  EnumLabel(session.state()), ScopeText(session.options()),
                  absl::StrCat(session.bytes())});
  }
  return table.ToString();
}

std::string CloseSessionTable(const v1::CloseSessionResponse& response) {
  Table summary;
  summary.AddRow({"written_back", BoolText(response.written_back())});
  summary.AddRow({"bytes_written", absl::StrCat(response.bytes_written())});
  if (!response.reason().empty()) {
    summary.AddRow({"reason", response.reason()});
  }
  if (response.generations().empty()) return summary.ToString();
  return absl::StrCat(summary.ToString(), "\n",
                      GenerationsTable(response.generations()));
}

std::string TensorInfoTable(const v1::TensorInfo& info) {
  Table table({"FQN", "DTYPE", "SHAPE", "NUMEL"});
  table.AddRow(TensorInfoCells(info));
  return table.ToString();
}

std::string WriteTensorTable(const v1::WriteTensorResponse& response) {
  Table table({"FQN", "DTYPE", "SHAPE", "NUMEL", "WRITTEN"});
  std::vector<std::string> row = TensorInfoCells(response.info());
  row.push_back(absl::StrCat(response.elements_written()));
  table.AddRow(std::move(row));
  return table.ToString();
}

std::string TensorStatsTable(const v1::TensorStatsResponse& response) {
  Table table(
      {"FQN", "DTYPE", "SHAPE", "MIN", "MAX", "MEAN", "L2_NORM", "NAN", "INF"});
  std::string histograms;
  for (const v1::TensorStats& stats : response.tensors()) {
    const v1::TensorInfo& info = stats.info();
    table.AddRow({info.fqn(), EnumLabel(info.dtype()), ShapeText(info.shape()),
                  absl::StrCat(stats.min()), absl::StrCat(stats.max()),
                  absl::StrCat(stats.mean()), absl::StrCat(stats.l2_norm()),
                  absl::StrCat(stats.nan_count()),
                  absl::StrCat(stats.inf_count())});
    if (stats.has_histogram()) {
      const v1::Histogram& histogram = stats.histogram();
      absl::StrAppend(&histograms, info.fqn(), " histogram [",
                      histogram.lower(), ", ", histogram.upper(),
                      "]: ", absl::StrJoin(histogram.counts(), " "), "\n");
    }
  }
  if (histograms.empty()) return table.ToString();
  return absl::StrCat(table.ToString(), "\n", histograms);
}

std::string ReportPhaseTable(const v1::ReportPhaseResponse& response) {
  Table summary;
  summary.AddRow({"previous_phase", EnumLabel(response.previous_phase())});
  summary.AddRow({"phase", EnumLabel(response.phase())});
  summary.AddRow(
      {"step", response.has_step() ? absl::StrCat(response.step()) : "-"});
  summary.AddRow({"waited_ms", absl::StrCat(response.waited_ms())});
  return absl::StrCat(summary.ToString(), "\n",
                      GenerationsTable(response.generations()));
}

}  // namespace summon::client
