#ifndef SUMMON_SERVER_METRICS_REGISTRY_H_
#define SUMMON_SERVER_METRICS_REGISTRY_H_

// A compact, thread-safe metrics registry rendered in the Prometheus text
// exposition format 0.0.4: counters, gauges, histograms with fixed buckets,
// each a family of label sets, plus gauges computed at scrape time.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace summon::server::metrics {

// Label values in the order of the family's label names.
using LabelValues = std::vector<std::string>;

class Family {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  Family(std::string name, std::string help, Type type,
         std::vector<std::string> labels, std::vector<double> buckets = {});

  // Counter: adds `value` (>= 0). Gauge: adds (may be negative).
  void Add(const LabelValues& labels, double value = 1);
  // Gauge: sets.
  void Set(const LabelValues& labels, double value);
  // Histogram: records one observation.
  void Observe(const LabelValues& labels, double value);
  // The current value of a counter or gauge (0 when never touched); a
  // histogram's count.
  double Value(const LabelValues& labels) const;

  void Render(std::string* out) const;
  const std::string& name() const { return name_; }

 private:
  struct Cell {
    double value = 0;                // Counter/gauge; histogram sum.
    std::vector<uint64_t> counts;    // Histogram: per bucket (not cumulative).
    uint64_t count = 0;              // Histogram: observations.
  };
  Cell& CellFor(const LabelValues& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const std::string help_;
  const Type type_;
  const std::vector<std::string> labels_;
  const std::vector<double> buckets_;
  mutable absl::Mutex mu_;
  std::map<LabelValues, Cell> cells_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  // A callback gauge's samples: label values -> value.
  using Samples = std::vector<std::pair<LabelValues, double>>;

  Family* Counter(const std::string& name, const std::string& help,
                  std::vector<std::string> labels = {});
  Family* Gauge(const std::string& name, const std::string& help,
                std::vector<std::string> labels = {});
  Family* Histogram(const std::string& name, const std::string& help,
                    std::vector<double> buckets,
                    std::vector<std::string> labels = {});
  // A gauge computed at each scrape. Returns an id for RemoveCallback.
  int CallbackGauge(const std::string& name, const std::string& help,
                    std::vector<std::string> labels,
                    std::function<Samples()> compute);
  // A counter computed at each scrape, from a count the component keeps
  // since start (it only grows). Same id space as CallbackGauge.
  int CallbackCounter(const std::string& name, const std::string& help,
                      std::vector<std::string> labels,
                      std::function<Samples()> compute);
  void RemoveCallback(int id);

  // Every family, sorted by name, in the text exposition format.
  std::string Render() const;

 private:
  struct Callback {
    std::string name;
    std::string help;
    std::vector<std::string> labels;
    std::function<Samples()> compute;
    const char* type;  // "gauge" or "counter".
  };
  int AddCallback(Callback callback);
  Family* Add(std::unique_ptr<Family> family);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
  std::map<int, Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Escapes a label value (backslash, quote, newline).
std::string EscapeLabelValue(const std::string& value);
// Formats a sample value (+Inf, -Inf, NaN, integers without exponent).
std::string FormatValue(double value);

}  // namespace summon::server::metrics

#endif  // SUMMON_SERVER_METRICS_REGISTRY_H_
