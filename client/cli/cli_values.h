#ifndef SUMMON_CLIENT_CLI_CLI_VALUES_H_
#define SUMMON_CLIENT_CLI_CLI_VALUES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "summon/v1/types.pb.h"

namespace summon::client {

// Conversions from command-line text to request values. Errors are
// INVALID_ARGUMENT naming `what` (e.g. "--lease" or "RANK").

// A decimal integer that fits T (int32_t, int64_t, uint32_t, uint64_t).
template <typename T>
absl::StatusOr<T> ParseNumber(absl::string_view what, absl::string_view text) {
  T value;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", text, "' is not a valid number"));
  }
  return value;
}

// An enum value by its label: the value name without the enum's common
// prefix, in any case ("full_shard", "FULL_SHARD", "bfloat16", "forward").
// The UNSPECIFIED value is not accepted.
absl::StatusOr<int> ParseEnumLabel(const google::protobuf::EnumDescriptor& type,
                                   absl::string_view what,
                                   absl::string_view text);
// The label of `value` ("FULL_SHARD"), or its number for an unknown value.
std::string EnumLabel(const google::protobuf::EnumDescriptor& type, int value);

template <typename Enum>
absl::StatusOr<Enum> ParseEnum(absl::string_view what, absl::string_view text) {
  absl::StatusOr<int> value =
      ParseEnumLabel(*google::protobuf::GetEnumDescriptor<Enum>(), what, text);
  if (!value.ok()) return value.status();
  return static_cast<Enum>(*value);
}

template <typename Enum>
std::string EnumLabel(Enum value) {
  return EnumLabel(*google::protobuf::GetEnumDescriptor<Enum>(),
                   static_cast<int>(value));
}

// "zeros" or "seeded:SEED".
absl::StatusOr<v1::InitMethod> ParseInitMethod(absl::string_view what,
                                               absl::string_view text);

// "a,b,c" → {"a", "b", "c"}; empty items are errors, "" is the empty list.
absl::StatusOr<std::vector<std::string>> ParseList(absl::string_view what,
                                                   absl::string_view text);

// "0,1,3" → {0, 1, 3}; "all" → {} (every rank, as GradientShards means it).
absl::StatusOr<std::vector<int32_t>> ParseRankList(absl::string_view what,
                                                   absl::string_view text);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_CLI_VALUES_H_
