#ifndef SUMMON_SERVER_SESSION_SESSION_ID_H_
#define SUMMON_SERVER_SESSION_SESSION_ID_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace summon::server {

// A session id: "s-" and 16 hex digits, the first 6 the low 24 bits of the
// cluster epoch it was opened in (000000 on a single node), the other 10
// random. Sessions live only in their leader's memory; the epoch in the id
// lets any later leader tell a session of an earlier leader from an id
// nobody issued, without a record in etcd on the open path.
std::string NewSessionId(uint64_t epoch);

// The epoch tag of an id of that form: EpochTag of the epoch it was opened
// in. Nullopt for any other string.
std::optional<uint32_t> SessionIdEpochTag(absl::string_view id);

// The low 24 bits of `epoch`, as ids carry it.
uint32_t EpochTag(uint64_t epoch);

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_SESSION_ID_H_
