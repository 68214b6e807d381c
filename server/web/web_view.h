#ifndef SUMMON_SERVER_WEB_WEB_VIEW_H_
#define SUMMON_SERVER_WEB_WEB_VIEW_H_

// The read-only web view summond serves beside /metrics (docs/api.md "Web
// view"): a page (server/web/web_assets.cc, embedded) and the JSON under
// /api/ that the page and scripts share. The handlers only translate: each
// /api/ call is the same Summon RPC a summonctl user would make, sent over an
// in-process channel as the viewer the HTTP request identified, so the role
// table (server/auth/roles.cc) decides exactly as it does for gRPC.

#include <functional>
#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "server/auth/authorizer.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace summon::server::web {

class WebView {
 public:
  // `channel` gives the in-process channel to this daemon's Summon service
  // (null until the gRPC server is up: /api/ answers 503 then). `serve_page`
  // false: every page and /api/ path answers 403 with `refusal` (the
  // listener may not carry viewer credentials in plaintext).
  WebView(const auth::Authorizer* authorizer,
          std::function<std::shared_ptr<grpc::Channel>()> channel,
          bool serve_page, std::string refusal);

  // Adds GET /, /login, /web/*, /api/* and POST /login to `http`.
  void Register(httplib::Server& http) const;

 private:
  const auth::Authorizer* const authorizer_;
  const std::function<std::shared_ptr<grpc::Channel>()> channel_;
  const bool serve_page_;
  const std::string refusal_;
};

// Whether a --metrics-listen HOST:PORT may serve the web view in plaintext:
// a loopback host (the --insecure-local rule for gRPC listeners).
bool MayServePlaintext(const std::string& listen_address);

}  // namespace summon::server::web

#endif  // SUMMON_SERVER_WEB_WEB_VIEW_H_
