#include "tests/coordinator/history.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::tests {
namespace {

// Violations reported per rule: the first few name the problem well
// enough, a flood would hide the other rules'.
constexpr int kPerRule = 5;

// One sighting of a unit's version: a read, an acknowledged write, or the
// end state through one node (start: infinite future).
struct Observation {
  std::string what;  // "read #12 (node 1)", "end state via node 0".
  std::string unit;
  int version = 0;  // 0: the initial values; k: the unit's k-th write.
  absl::Time start;
  absl::Time end;
  uint64_t epoch = 0;
  bool acked_write = false;
  bool end_state = false;
};

std::string Describe(const Op& op) {
  const char* kind = op.kind == OpKind::kRead    ? "read"
                     : op.kind == OpKind::kWrite ? "write"
                                                 : "phase report";
  return absl::StrCat(kind, " #", op.id, " (node ", op.node, ", epoch ",
                      op.epoch, ")");
}

class Checker {
 public:
  explicit Checker(const CheckInput& input) : input_(input) {}

  CheckResult Run() {
    Count();
    IndexWrites();
    ObserveReads();
    ObserveEnd();
    CheckFailedNeverSeen();
    CheckStale();
    CheckGenerations();
    CheckLostAcks();
    CheckDeposed();
    return std::move(result_);
  }

 private:
  void Violate(const std::string& rule, const std::string& text) {
    ++result_.violation_count;
    if (++per_rule_[rule] <= kPerRule) {
      result_.violations.push_back(absl::StrCat(rule, ": ", text));
    }
  }

  void Count() {
    std::vector<const Op*> ok;
    for (const Op& op : input_.ops) {
      ++result_.ops;
      if (op.kind == OpKind::kRead) ++result_.reads;
      if (op.kind == OpKind::kWrite) ++result_.writes;
      if (op.kind == OpKind::kPhase) ++result_.phases;
      if (op.kind == OpKind::kWrite && op.outcome == Outcome::kOk) {
        ++result_.acked;
      }
      if (op.outcome == Outcome::kFailed) ++result_.failed;
      if (op.outcome == Outcome::kUnknown) ++result_.unknown;
      if (op.outcome == Outcome::kOk) ok.push_back(&op);
    }
    if (input_.ops.empty()) return;
    std::sort(ok.begin(), ok.end(),
              [](const Op* a, const Op* b) { return a->end < b->end; });
    absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast();
    for (const Op& op : input_.ops) {
      first = std::min(first, op.start);
      last = std::max(last, op.end);
    }
    absl::Time previous = first;
    for (const Op* op : ok) {
      result_.max_unavailable =
          std::max(result_.max_unavailable, op->end - previous);
      previous = op->end;
    }
    result_.max_unavailable =
        std::max(result_.max_unavailable, last - previous);
  }

  // Numbers each unit's writes 1, 2, ... in start order, and checks that
  // they do not overlap (the rules below rely on that order).
  void IndexWrites() {
    for (const Op& op : input_.ops) {
      if (op.kind == OpKind::kWrite) writes_[op.unit].push_back(&op);
    }
    for (auto& [unit, writes] : writes_) {
      std::sort(writes.begin(), writes.end(),
                [](const Op* a, const Op* b) { return a->start < b->start; });
      for (size_t i = 1; i < writes.size(); ++i) {
        if (writes[i]->start < writes[i - 1]->end) {
          Violate("malformed history",
                  absl::StrCat(Describe(*writes[i]), " overlaps ",
                               Describe(*writes[i - 1]), " of unit '", unit,
                               "'"));
        }
      }
    }
  }

  // The version of `unit` whose values of `fqn` have `checksum`.
  std::optional<int> VersionOf(const std::string& fqn, uint64_t checksum) {
    auto initial = input_.initial.find(fqn);
    if (initial != input_.initial.end() && initial->second == checksum) {
      return 0;
    }
    auto unit = input_.unit_of.find(fqn);
    if (unit == input_.unit_of.end()) return std::nullopt;
    const std::vector<const Op*>& writes = writes_[unit->second];
    for (size_t i = 0; i < writes.size(); ++i) {
      auto written = writes[i]->checksums.find(fqn);
      if (written != writes[i]->checksums.end() &&
          written->second == checksum) {
        return static_cast<int>(i) + 1;
      }
    }
    return std::nullopt;
  }

  // The one version every tensor of `checksums` shows; nullopt (with the
  // violation recorded) for a phantom or a mix.
  std::optional<int> OneVersion(
      const std::string& what,
      const std::map<std::string, uint64_t>& checksums) {
    std::optional<int> version;
    std::string first_fqn;
    for (const auto& [fqn, checksum] : checksums) {
      std::optional<int> v = VersionOf(fqn, checksum);
      if (!v.has_value()) {
        Violate("phantom read",
                absl::StrCat(what, " read ", fqn, " with checksum ",
                             absl::Hex(checksum),
                             ": neither the initial values nor any write's"));
        return std::nullopt;
      }
      if (version.has_value() && *version != *v) {
        Violate("half applied",
                absl::StrCat(what, " read ", first_fqn, " at version ",
                             *version, " but ", fqn, " at version ", *v,
                             " (one unit, one writeback)"));
        return std::nullopt;
      }
      version = v;
      first_fqn = fqn;
    }
    return version;
  }

  void ObserveReads() {
    for (const Op& op : input_.ops) {
      if (op.outcome != Outcome::kOk) continue;
      if (op.kind == OpKind::kRead) {
        std::optional<int> version = OneVersion(Describe(op), op.checksums);
        if (!version.has_value()) continue;
        observations_.push_back(
            {Describe(op), op.unit, *version, op.start, op.end, op.epoch});
        read_of_[observations_.size() - 1] = &op;
      }
    }
    // An acknowledged write is a sighting of itself.
    for (const auto& [unit, writes] : writes_) {
      for (size_t i = 0; i < writes.size(); ++i) {
        if (writes[i]->outcome != Outcome::kOk) continue;
        observations_.push_back({Describe(*writes[i]), unit,
                                 static_cast<int>(i) + 1, writes[i]->start,
                                 writes[i]->end, writes[i]->epoch,
                                 /*acked_write=*/true});
      }
    }
  }

  void ObserveEnd() {
    // Unit -> (node, version) at the end.
    std::map<std::string, std::pair<int, int>> agreed;
    for (const auto& [node, reads] : input_.final_reads) {
      std::map<std::string, std::map<std::string, uint64_t>> by_unit;
      for (const auto& [fqn, checksum] : reads) {
        by_unit[input_.unit_of.at(fqn)][fqn] = checksum;
      }
      for (const auto& [unit, checksums] : by_unit) {
        const std::string what = absl::StrCat("end state via node ", node);
        std::optional<int> version = OneVersion(what, checksums);
        if (!version.has_value()) continue;
        observations_.push_back({what, unit, *version, absl::InfiniteFuture(),
                                 absl::InfiniteFuture(), 0,
                                 /*acked_write=*/false, /*end_state=*/true});
        auto [it, first] = agreed.emplace(unit, std::make_pair(node, *version));
        if (!first && it->second.second != *version) {
          Violate("half applied",
                  absl::StrCat("unit '", unit, "' ends at version ",
                               it->second.second, " via node ",
                               it->second.first, " but at version ", *version,
                               " via node ", node));
        }
        final_[unit] = std::max(final_[unit], *version);
      }
    }
  }

  const Op* WriteOf(const std::string& unit, int version) {
    return version == 0 ? nullptr : writes_[unit][version - 1];
  }

  void CheckFailedNeverSeen() {
    for (const Observation& seen : observations_) {
      const Op* write = WriteOf(seen.unit, seen.version);
      if (write != nullptr && write->outcome == Outcome::kFailed) {
        Violate("phantom read",
                absl::StrCat(seen.what, " saw the values of ",
                             Describe(*write), ", which failed (",
                             write->error, ")"));
      }
    }
  }

  void CheckStale() {
    for (const Observation& a : observations_) {
      for (const Observation& b : observations_) {
        if (a.unit != b.unit || !(b.start > a.end) ||
            b.version >= a.version) {
          continue;
        }
        // An end state behind an acknowledged write is a lost ack, below.
        if (a.acked_write && b.end_state) continue;
        Violate("stale version",
                absl::StrCat(b.what, " saw version ", b.version, " of unit '",
                             b.unit, "' after ", a.what, " had seen version ",
                             a.version));
      }
    }
  }

  void CheckGenerations() {
    // (worker, unit) -> the last read's generation and the read.
    std::map<std::pair<int, std::string>, const Op*> last;
    std::vector<const Op*> reads;
    for (const Op& op : input_.ops) {
      if (op.kind == OpKind::kRead && op.outcome == Outcome::kOk) {
        reads.push_back(&op);
      }
    }
    std::sort(reads.begin(), reads.end(),
              [](const Op* a, const Op* b) { return a->start < b->start; });
    for (const Op* op : reads) {
      const Op*& previous = last[{op->worker, op->unit}];
      if (previous != nullptr && op->generation < previous->generation) {
        Violate("generation regression",
                absl::StrCat("reader ", op->worker, ": ", Describe(*op),
                             " gathered unit '", op->unit, "' at generation ",
                             op->generation, " after ", Describe(*previous),
                             " at ", previous->generation));
      }
      previous = op;
    }
  }

  void CheckLostAcks() {
    for (const auto& [unit, writes] : writes_) {
      int last_acked = 0;
      for (size_t i = 0; i < writes.size(); ++i) {
        if (writes[i]->outcome == Outcome::kOk) last_acked = i + 1;
      }
      auto end = final_.find(unit);
      if (last_acked == 0 || end == final_.end()) continue;
      if (end->second < last_acked) {
        Violate("lost ack",
                absl::StrCat("unit '", unit, "' ends at version ", end->second,
                             ", not at acknowledged ",
                             Describe(*writes[last_acked - 1]), " (version ",
                             last_acked, ") or later"));
      }
    }
  }

  void CheckDeposed() {
    for (size_t r = 0; r < observations_.size(); ++r) {
      auto read = read_of_.find(r);
      if (read == read_of_.end() || read->second->epoch == 0) continue;
      const Observation& before = observations_[r];
      for (const Op* write : writes_[before.unit]) {
        const int version = VersionIndex(write);
        if (write->epoch == 0 || write->epoch >= before.epoch ||
            !(before.start > write->end) || before.version >= version) {
          continue;
        }
        for (const Observation& after : observations_) {
          if (after.unit != before.unit || after.version != version ||
              !(after.start > before.end)) {
            continue;
          }
          Violate("deposed epoch",
                  absl::StrCat(Describe(*write), " (version ", version,
                               ") was not applied when ", before.what,
                               " was served in a later epoch, yet ",
                               after.what, " saw it"));
          break;
        }
      }
    }
  }

  int VersionIndex(const Op* write) {
    const std::vector<const Op*>& writes = writes_[write->unit];
    return static_cast<int>(std::find(writes.begin(), writes.end(), write) -
                            writes.begin()) +
           1;
  }

  const CheckInput& input_;
  CheckResult result_;
  std::map<std::string, int> per_rule_;
  std::map<std::string, std::vector<const Op*>> writes_;  // Start order.
  std::vector<Observation> observations_;
  std::map<size_t, const Op*> read_of_;  // Observation -> its read.
  std::map<std::string, int> final_;     // Unit -> version at the end.
};

}  // namespace

uint64_t BytesChecksum(absl::string_view bytes) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

void History::Record(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  op.id = static_cast<int>(ops_.size());
  ops_.push_back(std::move(op));
}

std::vector<Op> History::ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

std::string CheckResult::Summary() const {
  return absl::StrCat(ops, " ops (", reads, " reads, ", writes, " writes, ",
                      phases, " phase reports): ", acked,
                      " writebacks acknowledged, ", failed, " failed, ",
                      unknown, " unknown; max unavailability ",
                      absl::FormatDuration(max_unavailable), "; ",
                      violation_count, " violations");
}

CheckResult CheckHistory(const CheckInput& input) {
  return Checker(input).Run();
}

}  // namespace summon::tests
