// summonctl's watch commands (docs/api.md#watches): add, list, remove, and
// show with a sparkline of the norm over the recorded steps.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/summonctl_internal.h"

namespace summon::client {
namespace {

std::string Number(double value) {
  return std::isnan(value) ? "nan" : absl::StrCat(value);
}

void WatchRow(const v1::Watch& watch, Table& table) {
  table.AddRow({watch.model(),
                watch.params().empty() ? "*" : absl::StrJoin(watch.params(), ","),
                absl::StrCat(watch.watched_size()), absl::StrCat(watch.every()),
                absl::StrCat(watch.histogram_bins()),
                watch.grads() ? "yes" : "no", absl::StrCat(watch.history()),
                watch.last_step() < 0 ? "-" : absl::StrCat(watch.last_step())});
}

Table WatchHeader() {
  return Table({"MODEL", "PARAMS", "WATCHED", "EVERY", "BINS", "GRADS",
                "HISTORY", "LAST_STEP"});
}

std::string WatchTable(const v1::Watch& watch) {
  Table table = WatchHeader();
  WatchRow(watch, table);
  return table.ToString();
}

std::string WatchListTable(const v1::ListWatchesResponse& response) {
  Table table = WatchHeader();
  for (const v1::Watch& watch : response.watches()) WatchRow(watch, table);
  return table.ToString();
}

}  // namespace

std::string NormSparkline(const std::vector<double>& norms) {
  static const char* const kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  double low = 0;
  double high = 0;
  bool any = false;
  for (double norm : norms) {
    if (!std::isfinite(norm)) continue;
    low = any ? std::min(low, norm) : norm;
    high = any ? std::max(high, norm) : norm;
    any = true;
  }
  std::string line;
  for (double norm : norms) {
    if (!std::isfinite(norm)) {
      line += "!";  // No finite element: a NaN/Inf-only tensor.
      continue;
    }
    const int bar =
        high > low ? static_cast<int>((norm - low) / (high - low) * 7.999) : 0;
    line += kBars[std::clamp(bar, 0, 7)];
  }
  return line;
}

namespace {

std::string ShowWatchTable(const v1::ShowWatchResponse& response) {
  std::vector<double> norms;
  for (const v1::WatchRecord& record : response.records()) {
    norms.push_back(record.l2_norm());
  }
  std::string text = absl::StrCat(
      response.grad() ? "grad of " : "", response.param(), " (",
      response.model(), "): ", response.records_size(), " records");
  if (!response.records().empty()) {
    absl::StrAppend(&text, ", steps ", response.records(0).step(), "..",
                    response.records().rbegin()->step());
  }
  if (response.first_nonfinite_step() >= 0) {
    absl::StrAppend(&text, ", NaN/Inf since step ",
                    response.first_nonfinite_step());
  }
  absl::StrAppend(&text, "\nl2_norm ", NormSparkline(norms), "\n\n");
  Table table({"STEP", "L2_NORM", "MEAN", "MIN", "MAX", "ABS_MAX", "NAN",
               "INF"});
  for (const v1::WatchRecord& record : response.records()) {
    table.AddRow({absl::StrCat(record.step()), Number(record.l2_norm()),
                  Number(record.mean()), Number(record.min()),
                  Number(record.max()), Number(record.abs_max()),
                  absl::StrCat(record.nan_count()),
                  absl::StrCat(record.inf_count())});
  }
  return text + table.ToString();
}

}  // namespace

absl::Status WatchAdd(const CommandContext& c) {
  v1::AddWatchRequest request;
  request.set_model(c.args.positionals[0]);
  if (c.args.Has("params")) {
    absl::StatusOr<std::vector<std::string>> globs =
        ParseList("--params", c.args.Value("params"));
    if (!globs.ok()) return globs.status();
    for (const std::string& glob : *globs) request.add_params(glob);
  }
  absl::StatusOr<std::optional<int32_t>> every =
      OptionalNumber<int32_t>(c.args, "every");
  if (!every.ok()) return every.status();
  request.set_every(every->value_or(1));
  absl::StatusOr<std::optional<int32_t>> bins =
      OptionalNumber<int32_t>(c.args, "histogram-bins");
  if (!bins.ok()) return bins.status();
  request.set_histogram_bins(bins->value_or(32));
  request.set_grads(c.args.Has("grads"));
  return Print(c, c.client.AddWatch(request), &WatchTable);
}

absl::Status WatchList(const CommandContext& c) {
  return Print(c, c.client.ListWatches(), &WatchListTable);
}

absl::Status WatchRemove(const CommandContext& c) {
  const std::string& model = c.args.positionals[0];
  // The reply is empty: say what was done, as model delete does.
  return Print(c, c.client.RemoveWatch(model),
               [&model](const v1::RemoveWatchResponse&) {
                 return absl::StrCat("removed the watch of ", model,
                                     " and its history\n");
               });
}

absl::Status WatchShow(const CommandContext& c) {
  v1::ShowWatchRequest request;
  request.set_model(c.args.positionals[0]);
  request.set_param(c.args.positionals[1]);
  absl::StatusOr<std::optional<int64_t>> since =
      OptionalNumber<int64_t>(c.args, "since");
  if (!since.ok()) return since.status();
  request.set_since(since->value_or(0));
  request.set_grad(c.args.Has("grad"));
  return Print(c, c.client.ShowWatch(request), &ShowWatchTable);
}

}  // namespace summon::client
