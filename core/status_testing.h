#ifndef SUMMON_CORE_STATUS_TESTING_H_
#define SUMMON_CORE_STATUS_TESTING_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace summon::core {

// Asserts the code and that the message names every offender (the rules'
// errors must say which rank, unit, session or phase is at fault).
inline void ExpectStatus(const absl::Status& status, absl::StatusCode code,
                         std::initializer_list<absl::string_view> named) {
  EXPECT_EQ(status.code(), code) << status;
  for (absl::string_view name : named) {
    EXPECT_NE(status.message().find(name), absl::string_view::npos)
        << "'" << name << "' missing from: " << status.message();
  }
}

}  // namespace summon::core

#endif  // SUMMON_CORE_STATUS_TESTING_H_
