#include "server/summond_flags.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/closest_name.h"

namespace summon::server {
namespace {

std::string Dashed(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", "-"}});
}

std::string Underscored(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

// Abseil's own flags, which ParseCommandLine handles (not all of them are
// in the flag registry).
constexpr absl::string_view kAbseilFlags[] = {
    "help",     "helpfull",        "helpshort", "helppackage", "helpon",
    "helpmatch", "version",        "only_check_args", "flagfile", "fromenv",
    "tryfromenv", "undefok"};

}  // namespace

absl::Status CheckFlagArgs(const std::vector<std::string>& args,
                           absl::string_view main_file) {
  const auto flags = absl::GetAllFlags();
  std::vector<std::string> known = {"help", "helpfull", "version"};
  for (const auto& [name, flag] : flags) {
    if (flag->Filename() == main_file) known.push_back(Dashed(name));
  }
  std::sort(known.begin(), known.end());
  auto find = [&flags](absl::string_view name) -> absl::CommandLineFlag* {
    const auto found = flags.find(Underscored(name));
    return found == flags.end() ? nullptr : found->second;
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // A positional argument.
    const absl::string_view body =
        absl::string_view(arg).substr(arg[1] == '-' ? 2 : 1);
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    const std::string typed = absl::StrCat("--", Dashed(name));
    if (std::find(std::begin(kAbseilFlags), std::end(kAbseilFlags),
                  Underscored(name)) != std::end(kAbseilFlags)) {
      continue;
    }
    absl::CommandLineFlag* flag = find(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      // --noinsecure-local: Abseil's negation of a boolean flag.
      absl::CommandLineFlag* negated = find(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() &&
          equals == absl::string_view::npos) {
        continue;
      }
    }
    if (flag == nullptr) {
      const std::string suggestion = core::ClosestName(Dashed(name), known);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag ", typed,
          suggestion.empty() ? ""
                             : absl::StrCat("; did you mean --", suggestion,
                                            "?"),
          " (summond --help lists the flags)"));
    }
    if (flag->Filename() != main_file) continue;  // --help, --flagfile, ...
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(body.substr(equals + 1));
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(typed, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrReplaceAll(
          error, {{absl::StrCat("flag '", flag->Name(), "'"), typed}}));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPortNamed(absl::string_view flag, absl::string_view address) {
  if (address.empty()) return absl::OkStatus();
  const size_t colon = address.rfind(':');
  const size_t bracket = address.rfind(']');
  const bool bare_ipv6 = address.find(':') != colon && address[0] != '[';
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 || bare_ipv6 ||
      (bracket != absl::string_view::npos && bracket > colon) ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", address,
        "' names no port: write HOST:PORT (127.0.0.1:7070, [::1]:7070; port "
        "0 picks a free one)"));
  }
  return absl::OkStatus();
}

}  // namespace summon::server
