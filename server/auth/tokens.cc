#include "server/auth/tokens.h"

#include <openssl/evp.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

namespace summon::server::auth {
namespace {

bool IsSha256Hex(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

absl::Status LineError(int line, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokens file line ", line, ": ", why));
}

// Fills `grant` from the fields after the credential column.
absl::Status ParseGrant(int line, const std::vector<absl::string_view>& fields,
                        bool is_token, Grant* grant) {
  if (fields.size() < 3) {
    return LineError(line, "expected <credential> <principal> <roles>");
  }
  grant->principal = std::string(fields[1]);
  absl::StatusOr<RoleSet> roles = RoleSet::Parse(fields[2]);
  if (!roles.ok()) return LineError(line, roles.status().message());
  grant->roles = *roles;
  for (size_t i = 3; i < fields.size(); ++i) {
    absl::string_view option = fields[i];
    if (absl::ConsumePrefix(&option, "models=")) {
      grant->models = absl::StrSplit(option, ',', absl::SkipEmpty());
    } else if (is_token && absl::ConsumePrefix(&option, "expires=")) {
      std::string error;
      if (!absl::ParseTime(absl::RFC3339_full, option, &grant->expires,
                           &error)) {
        return LineError(
            line, absl::StrCat("expires= is not RFC 3339 (", error, ")"));
      }
    } else {
      return LineError(
          line, absl::StrCat("unknown option '", fields[i].substr(0, 16), "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string TokenHash(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest, &length, EVP_sha256(),
             nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    const bool is_cert = fields[0] == "cert";
    if (!is_cert && !IsSha256Hex(fields[0])) {
      // Someone pasted the token itself: say so without repeating it.
      return LineError(line_number,
                       "the first column must be `cert` or the token's "
                       "SHA-256 as 64 lowercase hex digits (sha256sum), never "
                       "the token itself");
    }
    Grant grant;
    if (absl::Status parsed = ParseGrant(line_number, fields, !is_cert, &grant);
        !parsed.ok()) {
      return parsed;
    }
    auto& entries = is_cert ? table.certificates_ : table.tokens_;
    const std::string key = is_cert ? grant.principal : std::string(fields[0]);
    if (!entries.emplace(key, std::move(grant)).second) {
      return LineError(line_number,
                       is_cert ? "a second cert line for this principal"
                               : "a second line for the same token");
    }
  }
  return table;
}

TokenTable::Lookup TokenTable::FindToken(absl::string_view token,
                                         absl::Time now, Grant* grant) const {
  auto it = tokens_.find(TokenHash(token));
  if (it == tokens_.end()) return Lookup::kUnknown;
  if (now >= it->second.expires) return Lookup::kExpired;
  *grant = it->second;
  return Lookup::kFound;
}

std::optional<Grant> TokenTable::FindCertificate(absl::string_view name) const {
  auto it = certificates_.find(std::string(name));
  if (it == certificates_.end()) return std::nullopt;
  return it->second;
}

bool TokenTable::Grants(absl::string_view principal, Role role,
                        absl::Time now) const {
  for (const auto* entries : {&tokens_, &certificates_}) {
    for (const auto& [key, grant] : *entries) {
      if (grant.principal == principal && now < grant.expires &&
          grant.roles.Allows(role)) {
        return true;
      }
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Open(std::string path) {
  auto store = absl::WrapUnique(new TokenStore(std::move(path)));
  if (absl::Status loaded = store->Reload(); !loaded.ok()) return loaded;
  return store;
}

absl::Status TokenStore::Reload() {
  std::ifstream file(path_);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the tokens file ", path_));
  }
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<TokenTable> table = TokenTable::Parse(text.str());
  if (!table.ok()) {
    return absl::Status(table.status().code(),
                        absl::StrCat(path_, ": ", table.status().message()));
  }
  const size_t entries = table->size();
  {
    absl::MutexLock lock(&mu_);
    table_ = std::make_shared<const TokenTable>(std::move(*table));
  }
  spdlog::info("tokens file {}: {} entr{}", path_, entries,
               entries == 1 ? "y" : "ies");
  return absl::OkStatus();
}

std::shared_ptr<const TokenTable> TokenStore::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

}  // namespace summon::server::auth
