#include "server/metrics/registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"

namespace summon::server::metrics {
namespace {

std::string LabelText(const std::vector<std::string>& names,
                      const LabelValues& values,
                      const std::string& extra_name = "",
                      const std::string& extra_value = "") {
  std::string text;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    absl::StrAppend(&text, text.empty() ? "" : ",", names[i], "=\"",
                    EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : ",", extra_name, "=\"",
                    extra_value, "\"");
  }
  return text.empty() ? "" : absl::StrCat("{", text, "}");
}

void Header(std::string* out, const std::string& name, const std::string& help,
            const char* type) {
  std::string escaped;
  for (char c : help) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  absl::StrAppend(out, "# HELP ", name, " ", escaped, "\n# TYPE ", name, " ",
                  type, "\n");
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  // The shortest text that reads back as the same double.
  char buffer[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

Family::Family(std::string name, std::string help, Type type,
               std::vector<std::string> labels, std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      labels_(std::move(labels)),
      buckets_(std::move(buckets)) {
  // A family without labels has its one sample (0) from the start.
  if (labels_.empty()) {
    absl::MutexLock lock(&mu_);
    CellFor({});
  }
}

Family::Cell& Family::CellFor(const LabelValues& labels) {
  Cell& cell = cells_[labels];
  if (type_ == Type::kHistogram && cell.counts.empty()) {
    cell.counts.assign(buckets_.size(), 0);
  }
  return cell;
}

void Family::Add(const LabelValues& labels, double value) {
  if (type_ == Type::kCounter && value < 0) return;
  absl::MutexLock lock(&mu_);
  CellFor(labels).value += value;
}

void Family::Set(const LabelValues& labels, double value) {
  absl::MutexLock lock(&mu_);
  CellFor(labels).value = value;
}

void Family::Observe(const LabelValues& labels, double value) {
  absl::MutexLock lock(&mu_);
  Cell& cell = CellFor(labels);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (value <= buckets_[i]) {
      ++cell.counts[i];
      break;
    }
  }
  ++cell.count;
  cell.value += value;
}

double Family::Value(const LabelValues& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(labels);
  if (it == cells_.end()) return 0;
  return type_ == Type::kHistogram ? static_cast<double>(it->second.count)
                                   : it->second.value;
}

void Family::Render(std::string* out) const {
  static const char* const kTypes[] = {"counter", "gauge", "histogram"};
  Header(out, name_, help_, kTypes[static_cast<int>(type_)]);
  absl::MutexLock lock(&mu_);
  for (const auto& [values, cell] : cells_) {
    if (type_ != Type::kHistogram) {
      absl::StrAppend(out, name_, LabelText(labels_, values), " ",
                      FormatValue(cell.value), "\n");
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += cell.counts[i];
      absl::StrAppend(out, name_, "_bucket",
                      LabelText(labels_, values, "le", FormatValue(buckets_[i])),
                      " ", cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_bucket",
                    LabelText(labels_, values, "le", "+Inf"), " ", cell.count,
                    "\n");
    absl::StrAppend(out, name_, "_sum", LabelText(labels_, values), " ",
                    FormatValue(cell.value), "\n");
    absl::StrAppend(out, name_, "_count", LabelText(labels_, values), " ",
                    cell.count, "\n");
  }
}

Family* Registry::Add(std::unique_ptr<Family> family) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = families_.emplace(family->name(), nullptr);
  if (inserted) it->second = std::move(family);
  return it->second.get();
}

Family* Registry::Counter(const std::string& name, const std::string& help,
                          std::vector<std::string> labels) {
  return Add(std::make_unique<Family>(name, help, Family::Type::kCounter,
                                      std::move(labels)));
}

Family* Registry::Gauge(const std::string& name, const std::string& help,
                        std::vector<std::string> labels) {
  return Add(std::make_unique<Family>(name, help, Family::Type::kGauge,
                                      std::move(labels)));
}

Family* Registry::Histogram(const std::string& name, const std::string& help,
                            std::vector<double> buckets,
                            std::vector<std::string> labels) {
  return Add(std::make_unique<Family>(name, help, Family::Type::kHistogram,
                                      std::move(labels), std::move(buckets)));
}

int Registry::AddCallback(Callback callback) {
  absl::MutexLock lock(&mu_);
  const int id = next_id_++;
  callbacks_[id] = std::move(callback);
  return id;
}

int Registry::CallbackGauge(const std::string& name, const std::string& help,
                            std::vector<std::string> labels,
                            std::function<Samples()> compute) {
  return AddCallback(
      Callback{name, help, std::move(labels), std::move(compute), "gauge"});
}

int Registry::CallbackCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> labels,
                              std::function<Samples()> compute) {
  return AddCallback(
      Callback{name, help, std::move(labels), std::move(compute), "counter"});
}

void Registry::RemoveCallback(int id) {
  absl::MutexLock lock(&mu_);
  callbacks_.erase(id);
}

std::string Registry::Render() const {
  // Rendered per name, sorted; callbacks with the same name (one per
  // server in a process) are merged under one header.
  std::map<std::string, std::string> sections;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) family->Render(&sections[name]);
  std::map<std::string, std::map<std::string, double>> computed;
  std::map<std::string, const Callback*> first;
  for (const auto& [id, callback] : callbacks_) {
    first.emplace(callback.name, &callback);
    std::map<std::string, double>& samples = computed[callback.name];
    for (const auto& [values, value] : callback.compute()) {
      samples[LabelText(callback.labels, values)] += value;
    }
  }
  for (const auto& [name, samples] : computed) {
    std::string& out = sections[name];
    Header(&out, name, first[name]->help, first[name]->type);
    for (const auto& [labels, value] : samples) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(value), "\n");
    }
  }
  std::string text;
  for (const auto& [name, section] : sections) text += section;
  return text;
}

}  // namespace summon::server::metrics
