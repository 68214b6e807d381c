#ifndef SUMMON_SERVER_MODEL_DATA_DIR_FORMAT_H_
#define SUMMON_SERVER_MODEL_DATA_DIR_FORMAT_H_

#include <string>

#include "absl/status/status.h"

namespace summon::server {

// The format of what a data dir holds (models.json, commits/, trainers.json,
// watches, the audit log): one number in <data-dir>/FORMAT. A release that
// changes how any of them is written raises kDataDirFormat and reads (or
// migrates) every older format; a summond never reads a data dir whose
// format is newer than its own, since it could misread or overwrite what a
// newer release wrote (a rolling update rolled back, a data dir copied from
// another node).
inline constexpr int kDataDirFormat = 1;

// Checked once at start, with the data dir's lock held and before anything
// reads it. A data dir without FORMAT (a fresh one, or one of the releases
// before the file existed, whose format is 1) is adopted: FORMAT is written.
// FAILED_PRECONDITION, saying what to do, when FORMAT names a newer format
// than `understood` or is not a format number (its content is never echoed);
// UNAVAILABLE when FORMAT cannot be read or written.
absl::Status CheckDataDirFormat(const std::string& data_dir);

}  // namespace summon::server

#endif  // SUMMON_SERVER_MODEL_DATA_DIR_FORMAT_H_
