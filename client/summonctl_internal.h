#ifndef SUMMON_CLIENT_SUMMONCTL_INTERNAL_H_
#define SUMMON_CLIENT_SUMMONCTL_INTERNAL_H_

// Shared by summonctl's command files (summonctl_commands.cc: models,
// sessions, the trainer and the command table; summonctl_tensors.cc: tensor
// transfers): printing a response and reading flag values.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli_output.h"
#include "client/cli_values.h"
#include "client/summonctl_commands.h"

namespace summon::client {

// Prints `response` in the context's format (`table` renders the table).
template <typename Message>
absl::Status Print(const CommandContext& context,
                   const absl::StatusOr<Message>& response,
                   std::string (*table)(const Message&)) {
  if (!response.ok()) return response.status();
  switch (context.format) {
    case OutputFormat::kJson:
      context.out << ToJson(*response);
      break;
    case OutputFormat::kYaml:
      context.out << ToYaml(*response);
      break;
    case OutputFormat::kTable:
      context.out << table(*response);
      break;
  }
  return absl::OkStatus();
}

// A numeric flag's value; nullopt when the flag is absent.
template <typename T>
absl::StatusOr<std::optional<T>> OptionalNumber(const Invocation& args,
                                                absl::string_view flag) {
  const std::optional<std::string> text = args.Get(flag);
  if (!text) return std::optional<T>();
  absl::StatusOr<T> value = ParseNumber<T>(absl::StrCat("--", flag), *text);
  if (!value.ok()) return value.status();
  return std::optional<T>(*value);
}

// An enum flag's value; `absent` when the flag is not given.
template <typename Enum>
absl::StatusOr<Enum> EnumFlag(const Invocation& args, absl::string_view flag,
                              Enum absent) {
  const std::optional<std::string> text = args.Get(flag);
  if (!text) return absent;
  return ParseEnum<Enum>(absl::StrCat("--", flag), *text);
}

// The tensor commands (summonctl_tensors.cc).
absl::Status TensorRead(const CommandContext& c);
absl::Status TensorWrite(const CommandContext& c);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_SUMMONCTL_INTERNAL_H_
