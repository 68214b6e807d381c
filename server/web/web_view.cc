#include "server/web/web_view.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "httplib.h"
#include "proto/summon/v1/summon.grpc.pb.h"
#include "server/auth/credentials.h"
#include "server/web/web_assets.h"

namespace summon::server::web {
namespace {

namespace v1 = ::summon::v1;

constexpr char kCookie[] = "summon_token";
constexpr char kJson[] = "application/json";
constexpr int kDefaultBins = 16;
constexpr int kMaxBins = 4096;

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, "\\u00",
                          absl::Hex(static_cast<unsigned char>(c),
                                    absl::kZeroPad2));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void SendError(httplib::Response& response, int http_status,
               absl::string_view code, absl::string_view message) {
  response.status = http_status;
  response.set_content(absl::StrCat("{\"error\":{\"code\":", JsonString(code),
                                    ",\"message\":", JsonString(message),
                                    "}}"),
                       kJson);
}

// A gRPC refusal as the HTTP status a browser or script expects.
void SendGrpcError(httplib::Response& response, const grpc::Status& status) {
  static const std::map<grpc::StatusCode, std::pair<int, const char*>> kMap = {
      {grpc::StatusCode::INVALID_ARGUMENT, {400, "INVALID_ARGUMENT"}},
      {grpc::StatusCode::UNAUTHENTICATED, {401, "UNAUTHENTICATED"}},
      {grpc::StatusCode::PERMISSION_DENIED, {403, "PERMISSION_DENIED"}},
      {grpc::StatusCode::NOT_FOUND, {404, "NOT_FOUND"}},
      {grpc::StatusCode::FAILED_PRECONDITION, {409, "FAILED_PRECONDITION"}},
      {grpc::StatusCode::ABORTED, {409, "ABORTED"}},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, {429, "RESOURCE_EXHAUSTED"}},
      {grpc::StatusCode::UNAVAILABLE, {503, "UNAVAILABLE"}},
  };
  auto it = kMap.find(status.error_code());
  if (it == kMap.end()) {
    SendError(response, 500, absl::StrCat("CODE_", status.error_code()),
              status.error_message());
  } else {
    SendError(response, it->second.first, it->second.second,
              status.error_message());
  }
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Zeros are data on this page (0 NaNs, step 0): print every field.
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options)
           .ok()) {
    return "{}";
  }
  return json;
}

std::string TokenOf(const httplib::Request& request) {
  const std::string authorization = request.get_header_value("Authorization");
  absl::string_view header = authorization;
  if (absl::ConsumePrefix(&header, "Bearer ")) {
    return std::string(absl::StripAsciiWhitespace(header));
  }
  const std::string cookies = request.get_header_value("Cookie");
  for (absl::string_view cookie : absl::StrSplit(cookies, ';')) {
    cookie = absl::StripAsciiWhitespace(cookie);
    if (absl::ConsumePrefix(&cookie, kCookie) &&
        absl::ConsumePrefix(&cookie, "=")) {
      return std::string(cookie);
    }
  }
  return "";
}

// Sends an RPC as the viewer `caller`.
class Caller {
 public:
  Caller(const auth::Authorizer& authorizer, auth::Caller caller,
         std::shared_ptr<grpc::Channel> channel)
      : authorizer_(authorizer),
        caller_(std::move(caller)),
        stub_(v1::Summon::NewStub(std::move(channel))) {}

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::Summon::Stub::*method)(
                        grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) const {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    context.AddMetadata(auth::kInProcessKeyHeader,
                        authorizer_.in_process_key());
    context.AddMetadata(auth::kPrincipalHeader, caller_.principal);
    context.AddMetadata(auth::kForwardedRolesHeader, caller_.roles.ToString());
    context.AddMetadata(auth::kForwardedModelsHeader,
                        absl::StrJoin(caller_.models, ","));
    return (stub_.get()->*method)(&context, request, response);
  }

  const auth::RoleSet& roles() const { return caller_.roles; }

 private:
  const auth::Authorizer& authorizer_;
  const auth::Caller caller_;
  std::unique_ptr<v1::Summon::Stub> stub_;
};

// The statistics and histogram of one parameter: a read-only session over
// just that parameter, TensorStats, and an abort (nothing is ever written).
grpc::Status ParamStats(const Caller& caller, const std::string& model,
                        const std::string& param, int bins,
                        v1::TensorStatsResponse* stats) {
  v1::OpenSessionRequest open;
  open.set_model(model);
  open.mutable_options()->mutable_params()->add_fqns(param);
  open.mutable_options()->set_writeback(false);
  open.mutable_options()->set_lease_seconds(60);
  v1::Session session;
  grpc::Status status =
      caller.Call(&v1::Summon::Stub::OpenSession, open, &session);
  if (!status.ok()) return status;
  v1::TensorStatsRequest request;
  request.set_session_id(session.id());
  request.set_histogram_bins(static_cast<uint32_t>(bins));
  status = caller.Call(&v1::Summon::Stub::TensorStats, request, stats);
  v1::CloseSessionRequest close;
  close.set_session_id(session.id());
  close.set_abort(true);
  v1::CloseSessionResponse closed;
  caller.Call(&v1::Summon::Stub::CloseSession, close, &closed).ok();
  return status;
}

}  // namespace

bool MayServePlaintext(const std::string& listen_address) {
  return auth::IsLoopbackListener(listen_address);
}

WebView::WebView(const auth::Authorizer* authorizer,
                 std::function<std::shared_ptr<grpc::Channel>()> channel,
                 bool serve_page, std::string refusal)
    : authorizer_(authorizer),
      channel_(std::move(channel)),
      serve_page_(serve_page),
      refusal_(std::move(refusal)) {}

void WebView::Register(httplib::Server& http) const {
  // Who is looking: the viewer a token names, or in insecure-local mode
  // (no credentials exist) everyone, as the gRPC listeners do. Writes the
  // refusal and returns nullopt otherwise.
  auto identify = [this](const httplib::Request& request,
                         httplib::Response& response)
      -> std::optional<auth::Caller> {
    if (!serve_page_) {
      SendError(response, 403, "PERMISSION_DENIED", refusal_);
      return std::nullopt;
    }
    const std::string token = TokenOf(request);
    if (token.empty() && authorizer_->insecure_local()) {
      auth::Caller anyone;
      anyone.principal = "web";
      anyone.roles = auth::RoleSet::All();
      return anyone;
    }
    if (token.empty()) {
      SendError(response, 401, "UNAUTHENTICATED",
                "present a viewer token: 'Authorization: Bearer T' or log in "
                "at /login");
      return std::nullopt;
    }
    absl::StatusOr<auth::Caller> caller = authorizer_->IdentifyToken(token);
    if (!caller.ok()) {
      SendError(response, 401, "UNAUTHENTICATED", caller.status().message());
      return std::nullopt;
    }
    if (!caller->roles.Allows(auth::Role::kViewer)) {
      SendError(response, 403, "PERMISSION_DENIED",
                absl::StrCat("principal '", caller->principal,
                             "' needs the viewer role"));
      return std::nullopt;
    }
    return *std::move(caller);
  };
  // An /api/ handler: identify, then `body` with a Caller for the RPCs.
  auto api = [this, identify](auto body) {
    return [this, identify, body](const httplib::Request& request,
                                  httplib::Response& response) {
      std::optional<auth::Caller> who = identify(request, response);
      if (!who) return;
      std::shared_ptr<grpc::Channel> channel = channel_();
      if (channel == nullptr) {
        SendError(response, 503, "UNAVAILABLE", "summond is starting");
        return;
      }
      response.set_header("Cache-Control", "no-store");
      body(Caller(*authorizer_, std::move(*who), std::move(channel)), request,
           response);
    };
  };
  auto rpc = [](const Caller& caller, auto method, const auto& request,
                auto response, httplib::Response& out) {
    const grpc::Status status = caller.Call(method, request, &response);
    if (!status.ok()) return SendGrpcError(out, status);
    out.set_content(ToJson(response), kJson);
  };

  auto page = [identify](const char* body) {
    return [identify, body](const httplib::Request& request,
                            httplib::Response& response) {
      if (!identify(request, response)) {
        // A browser asking for the page gets the login form.
        if (response.status == 401) {
          response.set_content(kLoginHtml, "text/html; charset=utf-8");
        }
        return;
      }
      response.set_header("Content-Security-Policy",
                          "default-src 'self'; style-src 'self'; "
                          "script-src 'self'; img-src 'self' data:");
      response.set_content(body, "text/html; charset=utf-8");
    };
  };
  http.Get("/", page(kIndexHtml));
  http.Get("/web/style.css", [](const httplib::Request&,
                                httplib::Response& response) {
    response.set_content(kStyleCss, "text/css; charset=utf-8");
  });
  http.Get("/web/app.js", [](const httplib::Request&,
                             httplib::Response& response) {
    response.set_content(kAppJs, "text/javascript; charset=utf-8");
  });
  http.Get("/login", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(kLoginHtml, "text/html; charset=utf-8");
  });
  // The login form: a valid viewer token becomes an HttpOnly,
  // SameSite=Strict cookie so the page's script never holds it; over HTTPS
  // (a TLS daemon) also Secure, so the browser never sends it in the clear.
  http.Post("/login", [this, identify](const httplib::Request& request,
                                       httplib::Response& response) {
    httplib::Request with_token = request;
    with_token.headers.emplace(
        "Authorization",
        absl::StrCat("Bearer ", request.get_param_value("token")));
    if (!identify(with_token, response)) {
      if (response.status == 401) {
        response.set_content(kLoginHtml, "text/html; charset=utf-8");
      }
      return;
    }
    response.set_header(
        "Set-Cookie",
        absl::StrCat(kCookie, "=", request.get_param_value("token"),
                     "; Path=/; HttpOnly; SameSite=Strict",
                     request.ssl != nullptr ? "; Secure" : ""));
    response.set_redirect("/", 303);
  });

  // The node this page is served by answers from its own membership view
  // (GetClusterStatus is never forwarded), so the page shows a node, or the
  // leader, down.
  http.Get("/api/cluster", api([rpc](const Caller& caller,
                                     const httplib::Request&,
                                     httplib::Response& response) {
             rpc(caller, &v1::Summon::Stub::GetClusterStatus,
                 v1::GetClusterStatusRequest(), v1::ClusterStatus(), response);
           }));
  http.Get("/api/models", api([rpc](const Caller& caller,
                                    const httplib::Request&,
                                    httplib::Response& response) {
             rpc(caller, &v1::Summon::Stub::ListModels,
                 v1::ListModelsRequest(), v1::ListModelsResponse(), response);
           }));
  http.Get(R"(/api/models/([A-Za-z0-9._-]+))",
           api([rpc](const Caller& caller, const httplib::Request& request,
                     httplib::Response& response) {
             v1::DescribeModelRequest describe;
             describe.set_model(request.matches[1]);
             rpc(caller, &v1::Summon::Stub::DescribeModel, describe,
                 v1::Model(), response);
           }));
  http.Get("/api/sessions",
           api([rpc](const Caller& caller, const httplib::Request& request,
                     httplib::Response& response) {
             v1::ListSessionsRequest list;
             list.set_model(request.get_param_value("model"));
             // An operator (admin role: everyone with --insecure-local)
             // sees every session and who holds it; a viewer its own.
             list.set_all(caller.roles().Allows(auth::Role::kAdmin));
             rpc(caller, &v1::Summon::Stub::ListSessions, list,
                 v1::ListSessionsResponse(), response);
           }));
  http.Get("/api/watches", api([rpc](const Caller& caller,
                                     const httplib::Request&,
                                     httplib::Response& response) {
             rpc(caller, &v1::Summon::Stub::ListWatches,
                 v1::ListWatchesRequest(), v1::ListWatchesResponse(), response);
           }));
  http.Get("/api/watch", api([rpc](const Caller& caller,
                                   const httplib::Request& request,
                                   httplib::Response& response) {
             v1::ShowWatchRequest show;
             show.set_model(request.get_param_value("model"));
             show.set_param(request.get_param_value("param"));
             show.set_grad(request.get_param_value("grad") == "1");
             int64_t since = 0;
             if (request.has_param("since") &&
                 !absl::SimpleAtoi(request.get_param_value("since"), &since)) {
               return SendError(response, 400, "INVALID_ARGUMENT",
                                "since must be a step number");
             }
             show.set_since(since);
             rpc(caller, &v1::Summon::Stub::ShowWatch, show,
                 v1::ShowWatchResponse(), response);
           }));
  http.Get("/api/stats", api([](const Caller& caller,
                                const httplib::Request& request,
                                httplib::Response& response) {
             int bins = kDefaultBins;
             if (request.has_param("bins") &&
                 (!absl::SimpleAtoi(request.get_param_value("bins"), &bins) ||
                  bins < 0 || bins > kMaxBins)) {
               return SendError(response, 400, "INVALID_ARGUMENT",
                                absl::StrCat("bins must be 0 to ", kMaxBins));
             }
             if (request.get_param_value("model").empty() ||
                 request.get_param_value("param").empty()) {
               return SendError(response, 400, "INVALID_ARGUMENT",
                                "/api/stats needs ?model=M&param=FQN");
             }
             v1::TensorStatsResponse stats;
             const grpc::Status status =
                 ParamStats(caller, request.get_param_value("model"),
                            request.get_param_value("param"), bins, &stats);
             if (!status.ok()) return SendGrpcError(response, status);
             response.set_content(ToJson(stats), kJson);
           }));
}

}  // namespace summon::server::web
