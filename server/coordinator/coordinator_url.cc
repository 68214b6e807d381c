#include "server/coordinator/coordinator_url.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace summon::server {

namespace {

constexpr absl::string_view kScheme = "etcd://";
constexpr size_t kMaxClusterName = 63;

absl::Status Invalid(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--coordinator: ", why,
                   " (expected etcd://HOST:PORT[,HOST:PORT...]/CLUSTER)"));
}

absl::Status CheckEndpoint(absl::string_view endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.empty() || colon == absl::string_view::npos) {
    return Invalid(absl::StrCat("endpoint '", endpoint, "' is not HOST:PORT"));
  }
  absl::string_view host = endpoint.substr(0, colon);
  if (absl::StartsWith(host, "[") != absl::EndsWith(host, "]") ||
      host == "[]" || host.empty()) {
    return Invalid(absl::StrCat("endpoint '", endpoint, "' has no host"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return Invalid(
        absl::StrCat("endpoint '", endpoint, "' has no port in 1..65535"));
  }
  return absl::OkStatus();
}

bool ClusterChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

absl::StatusOr<CoordinatorUrl> ParseCoordinatorUrl(absl::string_view url) {
  if (!absl::StartsWith(url, kScheme)) {
    return Invalid("only etcd:// coordinators are known");
  }
  absl::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) {
    return Invalid("no /CLUSTER after the endpoints");
  }
  CoordinatorUrl parsed;
  absl::string_view hosts = rest.substr(0, slash);
  if (hosts.empty()) return Invalid("no etcd endpoint");
  for (absl::string_view endpoint : absl::StrSplit(hosts, ',')) {
    if (absl::Status ok = CheckEndpoint(endpoint); !ok.ok()) return ok;
    if (std::count(parsed.endpoints.begin(), parsed.endpoints.end(), endpoint) >
        0) {
      return Invalid(absl::StrCat("endpoint '", endpoint, "' is repeated"));
    }
    parsed.endpoints.emplace_back(endpoint);
  }
  parsed.cluster = std::string(rest.substr(slash + 1));
  if (parsed.cluster.empty()) return Invalid("no cluster name after '/'");
  if (parsed.cluster.size() > kMaxClusterName ||
      !std::all_of(parsed.cluster.begin(), parsed.cluster.end(), ClusterChar) ||
      parsed.cluster == "." || parsed.cluster == "..") {
    return Invalid(absl::StrCat("the cluster name must be 1 to ",
                                kMaxClusterName,
                                " of A-Z a-z 0-9 . _ - (and not . or ..)"));
  }
  return parsed;
}

absl::StatusOr<CoordinatorChoice> ParseCoordinatorFlag(absl::string_view flag) {
  CoordinatorChoice choice;
  if (flag.empty() || flag == "static") return choice;
  if (!absl::StrContains(flag, "://")) {
    return Invalid("use static, or an etcd:// URL");
  }
  absl::StatusOr<CoordinatorUrl> url = ParseCoordinatorUrl(flag);
  if (!url.ok()) return url.status();
  choice.etcd = true;
  choice.url = *std::move(url);
  return choice;
}

}  // namespace summon::server
