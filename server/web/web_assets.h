#ifndef SUMMON_SERVER_WEB_WEB_ASSETS_H_
#define SUMMON_SERVER_WEB_WEB_ASSETS_H_

// The web view's static files, compiled into summond (no build step, no
// CDN): one page whose script draws everything from /api/.

namespace summon::server::web {

extern const char kIndexHtml[];
extern const char kLoginHtml[];
extern const char kStyleCss[];
extern const char kAppJs[];

}  // namespace summon::server::web

#endif  // SUMMON_SERVER_WEB_WEB_ASSETS_H_
