// summonctl's advice on top of an answer: checks made before anything is
// sent (the server address, the model name) and what to try after a
// NOT_FOUND (did-you-mean for FQNs, how `model load` creates a model).

#include <algorithm>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/summonctl_internal.h"

namespace summon::client {
namespace {

// A lease ending within this is worth a warning.
constexpr int64_t kLeaseWarningMs = 60'000;

// The session's parameter and gradient FQNs and its model's aliases.
std::vector<std::string> SessionFqns(const SummonClient& client,
                                     const std::string& session_id) {
  std::vector<std::string> fqns;
  absl::StatusOr<v1::Session> session = client.GetSession(session_id);
  if (!session.ok()) return fqns;
  for (const v1::TensorInfo& info : session->params()) {
    fqns.push_back(info.fqn());
  }
  for (const v1::TensorInfo& info : session->grads()) {
    fqns.push_back(info.fqn());
  }
  absl::StatusOr<v1::Model> model = client.DescribeModel(session->model());
  if (!model.ok()) return fqns;
  for (const v1::Unit& unit : model->units()) {
    for (const v1::Parameter& param : unit.params()) {
      for (const std::string& alias : param.aliases()) fqns.push_back(alias);
    }
  }
  return fqns;
}

// The model's unit (module) FQNs and/or its parameter FQNs, aliases
// included: --scope takes only units, --params only parameters.
std::vector<std::string> ModelFqns(const SummonClient& client,
                                   const std::string& model_name,
                                   bool units = true, bool params = true) {
  std::vector<std::string> fqns;
  absl::StatusOr<v1::Model> model = client.DescribeModel(model_name);
  if (!model.ok()) return fqns;
  for (const v1::Unit& unit : model->units()) {
    if (units) fqns.push_back(unit.fqn());
    if (!params) continue;
    for (const v1::Parameter& param : unit.params()) {
      fqns.push_back(param.info().fqn());
      for (const std::string& alias : param.aliases()) fqns.push_back(alias);
    }
  }
  return fqns;
}

// `status` with " (did you mean 'x'?)" after it for the first of `given`
// that the message quotes and that is close to one of `known`.
absl::Status WithSuggestion(const absl::Status& status,
                            const std::vector<std::string>& given,
                            const std::vector<std::string>& known) {
  for (const std::string& name : given) {
    if (!absl::StrContains(status.message(), absl::StrCat("'", name, "'"))) {
      continue;
    }
    const std::string hint = DidYouMean(name, known);
    if (!hint.empty()) {
      return absl::Status(status.code(), absl::StrCat(status.message(), hint));
    }
  }
  return status;
}

}  // namespace

int RunDaemonCompletion(const std::vector<std::string>& words,
                        const SummonClient& client, std::ostream& out) {
  std::vector<std::string> found;
  const std::string kind = words.empty() ? "" : words[0];
  const std::string arg = words.size() > 1 ? words[1] : "";
  if (kind == "models") {
    absl::StatusOr<v1::ListModelsResponse> models = client.ListModels();
    if (models.ok()) {
      for (const v1::ModelSummary& model : models->models()) {
        found.push_back(model.name());
      }
    }
  } else if (kind == "sessions") {
    absl::StatusOr<v1::ListSessionsResponse> sessions = client.ListSessions();
    if (sessions.ok()) {
      for (const v1::Session& session : sessions->sessions()) {
        found.push_back(session.id());
      }
    }
  } else if (kind == "fqns" && !arg.empty()) {
    found = SessionFqns(client, arg);
  } else if (kind == "units" && !arg.empty()) {
    found = ModelFqns(client, arg, /*units=*/true, /*params=*/false);
  } else if (kind == "params" && !arg.empty()) {
    found = ModelFqns(client, arg, /*units=*/false, /*params=*/true);
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  for (const std::string& word : found) {
    if (!word.empty()) out << word << "\n";
  }
  return 0;
}

absl::Status CheckServerAddress(absl::string_view address,
                                absl::string_view from) {
  // A gRPC target with a scheme (unix:, unix-abstract:, dns:, ipv4:, ipv6:,
  // vsock:) is gRPC's to judge; a bare one must name its port.
  for (absl::string_view scheme :
       {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:"}) {
    if (absl::StartsWith(address, scheme)) return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  const size_t bracket = address.rfind(']');
  const bool bare_ipv6 = address.find(':') != colon && address[0] != '[';
  uint32_t port = 0;
  if (colon == absl::string_view::npos || bare_ipv6 ||
      (bracket != absl::string_view::npos && bracket > colon) ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port == 0 ||
      port > 65535 || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        from, " '", address,
        "' names no port: write HOST:PORT (127.0.0.1:7070, [::1]:7070) or "
        "unix:PATH"));
  }
  return absl::OkStatus();
}

absl::Status CheckModelName(absl::string_view name) {
  const bool valid =
      !name.empty() && name.size() <= kMaxModelNameBytes && name != "." &&
      name != ".." && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
      });
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model name '", name, "': use 1 to ", kMaxModelNameBytes,
                   " of A-Z a-z 0-9 . _ - (not '.' or '..')"));
}

void WarnIfLeaseEndsSoon(std::ostream& err, const v1::Session& session) {
  if (session.expires_at_unix_ms() <= 0) return;  // Not known.
  const int64_t left_ms =
      session.expires_at_unix_ms() - absl::ToUnixMillis(absl::Now());
  if (left_ms > kLeaseWarningMs) return;
  err << "warning: session " << session.id() << "'s lease "
      << (left_ms > 0 ? absl::StrCat("ends in ", (left_ms + 999) / 1000, " s")
                      : std::string("has ended"))
      << ": renew it (summonctl session renew " << session.id()
      << " [--lease SECONDS]) or its edits are dropped\n";
}

// For a name the session lacks but its model has, says so: a did-you-mean
// would point at a near name instead of at the session's scope.
std::optional<absl::Status> OutOfScope(const SummonClient& client,
                                       const absl::Status& status,
                                       const std::string& session_id,
                                       const std::vector<std::string>& given) {
  absl::StatusOr<v1::Session> session = client.GetSession(session_id);
  if (!session.ok()) return std::nullopt;
  const std::vector<std::string> in_model =
      ModelFqns(client, session->model(), /*units=*/false, /*params=*/true);
  const std::vector<std::string> in_session = SessionFqns(client, session_id);
  const auto has = [](const std::vector<std::string>& names,
                      const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const std::string& name : given) {
    if (absl::StrContains(status.message(), absl::StrCat("'", name, "'")) &&
        has(in_model, name) && !has(in_session, name)) {
      return absl::Status(
          status.code(),
          absl::StrCat(status.message(), ": '", name,
                       "' is a parameter of model '", session->model(),
                       "' outside this session's scope (open one with "
                       "--params ",
                       name, " or a --scope that holds it)"));
    }
  }
  return std::nullopt;
}

absl::Status WithHints(const CommandContext& c, const absl::Status& status) {
  if (!absl::IsNotFound(status) || c.args.command == nullptr) return status;
  const CommandSpec& command = *c.args.command;
  const std::vector<std::string>& words = c.args.positionals;
  if (command.noun == "tensor" && command.verb == "get") {
    // tensor get M FQN: the name is the model's to know.
    return WithSuggestion(status, {words[1]},
                          ModelFqns(c.client, words[0], /*units=*/false,
                                    /*params=*/true));
  }
  if (command.noun == "tensor" && words.size() > 1) {
    const std::vector<std::string> fqns(words.begin() + 1, words.end());
    if (std::optional<absl::Status> outside =
            OutOfScope(c.client, status, words[0], fqns)) {
      return *outside;
    }
    return WithSuggestion(status, fqns, SessionFqns(c.client, words[0]));
  }
  if (command.noun == "session" && command.verb == "open") {
    std::vector<std::string> given = {c.args.Value("scope")};
    absl::StatusOr<std::vector<std::string>> params =
        ParseList("--params", c.args.Value("params"));
    if (params.ok()) given.insert(given.end(), params->begin(), params->end());
    return WithSuggestion(status, given, ModelFqns(c.client, words[0]));
  }
  if (command.noun == "model" && command.verb == "load" &&
      !c.args.Has("wrap") && !c.args.Has("strategy") &&
      !c.args.Has("no-orig-params") && !c.args.Has("skip") &&
      absl::StrContains(status.message(),
                        absl::StrCat("no model named '", words[0], "'"))) {
    return absl::Status(status.code(),
                        absl::StrCat(status.message(),
                                     ": to create it from the checkpoint, "
                                     "add --wrap PREFIX,... (its units) "
                                     "and/or --strategy S"));
  }
  return status;
}

}  // namespace summon::client
