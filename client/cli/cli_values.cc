#include "client/cli/cli_values.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace summon::client {
namespace {

// "SHARDING_STRATEGY_" for ShardingStrategy: the UNSPECIFIED value's name
// without "UNSPECIFIED".
absl::string_view LabelPrefix(const google::protobuf::EnumDescriptor& type) {
  const google::protobuf::EnumValueDescriptor* unspecified =
      type.FindValueByNumber(0);
  if (unspecified == nullptr) return "";
  absl::string_view name = unspecified->name();
  absl::ConsumeSuffix(&name, "UNSPECIFIED");
  return name;
}

}  // namespace

absl::StatusOr<int> ParseEnumLabel(const google::protobuf::EnumDescriptor& type,
                                   absl::string_view what,
                                   absl::string_view text) {
  const absl::string_view prefix = LabelPrefix(type);
  std::vector<std::string> labels;
  for (int i = 0; i < type.value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor& value = *type.value(i);
    if (value.number() == 0) continue;
    absl::string_view label = value.name();
    absl::ConsumePrefix(&label, prefix);
    if (absl::EqualsIgnoreCase(label, text)) return value.number();
    labels.push_back(absl::AsciiStrToLower(label));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown value '", text, "' (one of ",
                   absl::StrJoin(labels, ", "), ")"));
}

std::string EnumLabel(const google::protobuf::EnumDescriptor& type, int value) {
  const google::protobuf::EnumValueDescriptor* descriptor =
      type.FindValueByNumber(value);
  if (descriptor == nullptr) return absl::StrCat(value);
  absl::string_view label = descriptor->name();
  absl::ConsumePrefix(&label, LabelPrefix(type));
  return std::string(label);
}

absl::StatusOr<v1::InitMethod> ParseInitMethod(absl::string_view what,
                                               absl::string_view text) {
  v1::InitMethod init;
  absl::string_view seed_text = text;
  if (text == "zeros") {
    init.mutable_zeros();
  } else if (text == "external") {
    init.mutable_external();
  } else if (absl::ConsumePrefix(&seed_text, "seeded:")) {
    absl::StatusOr<uint64_t> seed = ParseNumber<uint64_t>(what, seed_text);
    if (!seed.ok()) return seed.status();
    init.mutable_seeded()->set_seed(*seed);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", text,
                     "' is none of 'zeros', 'seeded:SEED' and 'external'"));
  }
  return init;
}

absl::StatusOr<std::vector<std::string>> ParseList(absl::string_view what,
                                                   absl::string_view text) {
  if (text.empty()) return std::vector<std::string>();
  std::vector<std::string> items = absl::StrSplit(text, ',');
  for (const std::string& item : items) {
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": empty item in '", text, "'"));
    }
  }
  return items;
}

absl::StatusOr<std::vector<int32_t>> ParseRankList(absl::string_view what,
                                                   absl::string_view text) {
  std::vector<int32_t> ranks;
  if (text == "all") return ranks;
  absl::StatusOr<std::vector<std::string>> items = ParseList(what, text);
  if (!items.ok()) return items.status();
  if (items->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs ranks like 0,1 or 'all'"));
  }
  for (const std::string& item : *items) {
    absl::StatusOr<int32_t> rank = ParseNumber<int32_t>(what, item);
    if (!rank.ok()) return rank.status();
    ranks.push_back(*rank);
  }
  return ranks;
}

}  // namespace summon::client
