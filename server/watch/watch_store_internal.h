#ifndef SUMMON_SERVER_WATCH_WATCH_STORE_INTERNAL_H_
#define SUMMON_SERVER_WATCH_WATCH_STORE_INTERNAL_H_

// What WatchStore's files share (watch_store.cc: the watches and their
// rings; watch_store_files.cc: their files; watch_store_replication.cc: the
// chunks between nodes): the JSON form of specs and records, which the
// files and the chunks both carry.

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/watch/watch_store.h"

namespace summon::server::watch_json {

using Json = nlohmann::json;

Json RecordToJson(const WatchRecord& record);
WatchRecord RecordFromJson(const Json& json);
Json SpecToJson(const WatchSpec& spec);
WatchSpec SpecFromJson(const Json& json);
Json OptionalStep(const std::optional<int64_t>& step);

// What each node keeps: whole milliseconds, so every copy compares equal.
inline absl::Time Millis(absl::Time time) {
  return absl::FromUnixMillis(absl::ToUnixMillis(time));
}

}  // namespace summon::server::watch_json

#endif  // SUMMON_SERVER_WATCH_WATCH_STORE_INTERNAL_H_
