#include "core/json_error.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/closest_name.h"
#include "nlohmann/json.hpp"

namespace summon::core {
namespace {

using Json = nlohmann::json;

// A SAX handler that builds nothing and keeps the first syntax error.
class ErrorOnly : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    failed = true;
    // `position` counts the bytes read, the offending one included.
    offset = position == 0 ? 0 : position - 1;
    token = last_token;
    what = error.what();
    return false;
  }

  bool failed = false;
  size_t offset = 0;
  std::string token;
  std::string what;
};

// nlohmann's message without its "[json.exception.parse_error.101] parse
// error at line 1, column 2: syntax error while parsing value - " prefix.
// Nor its "; last read: '...'" suffix, which quotes from the start of the
// token rather than the offending byte.
std::string Reason(const std::string& what) {
  std::string reason = what;
  const size_t dash = reason.find(" - ");
  if (dash != std::string::npos) {
    reason = reason.substr(dash + 3);
  } else if (const size_t colon = reason.rfind(": ");
             colon != std::string::npos) {
    reason = reason.substr(colon + 2);
  }
  return reason.substr(0, reason.find("; last read:"));
}

}  // namespace

TextPosition PositionOf(absl::string_view text, size_t offset) {
  TextPosition position;
  offset = std::min(offset, text.size());
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

std::string JsonSyntaxError(absl::string_view text) {
  ErrorOnly handler;
  Json::sax_parse(text.begin(), text.end(), &handler,
                  nlohmann::detail::input_format_t::json, /*strict=*/true);
  if (!handler.failed) return "";
  const TextPosition where = PositionOf(text, handler.offset);
  return absl::StrCat("line ", where.line, ", column ", where.column, ": ",
                      Reason(handler.what));
}

absl::Status CheckKnownFields(const nlohmann::json& object,
                              absl::string_view where,
                              const std::vector<std::string>& known) {
  for (const auto& [key, unused] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string closest = ClosestName(key, known);
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": unknown field '", key, "'",
        closest.empty() ? "" : absl::StrCat(" (did you mean '", closest, "'?)"),
        "; known: ", absl::StrJoin(known, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace summon::core
