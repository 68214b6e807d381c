#ifndef SUMMON_SERVER_METRICS_SUMMON_METRICS_H_
#define SUMMON_SERVER_METRICS_SUMMON_METRICS_H_

// summond's metrics (docs/operations.md "## Metrics" lists them) in one
// process-wide registry, and the HTTP endpoint serving them.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "server/metrics/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace summon::server::metrics {

struct SummonMetrics {
  Family* session_opens;       // summon_session_opens_total{result}
  Family* session_closes;      // summon_session_closes_total{result}
  Family* writebacks;          // summon_writebacks_total{result}
  Family* gathered_bytes;      // summon_gathered_bytes_total
  Family* read_bytes;          // summon_read_bytes_total
  Family* written_bytes;       // summon_written_bytes_total
  Family* gather_seconds;      // summon_gather_duration_seconds
  Family* read_seconds;        // summon_read_duration_seconds
  Family* writeback_seconds;   // summon_writeback_duration_seconds
};

Registry& DefaultRegistry();
const SummonMetrics& Summon();

// The gRPC status code's name, e.g. "OK", "FAILED_PRECONDITION".
std::string CodeName(grpc::StatusCode code);

// Seconds since `start`.
double SecondsSince(absl::Time start);

// PEM files of the listener's certificate and key; both empty: plain HTTP.
struct HttpTls {
  std::string cert;
  std::string key;
  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// Serves GET /metrics (DefaultRegistry) over HTTP, or HTTPS with `tls`, on a
// thread of its own.
class MetricsHttpServer {
 public:
  // HOST:PORT; port 0 picks a free port. UNAVAILABLE when it cannot bind;
  // INVALID_ARGUMENT when `tls`'s files do not load.
  // `routes`, when set, adds more handlers (the web view, server/web) to the
  // same listener before it serves.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen_address,
      const std::function<void(httplib::Server&)>& routes = nullptr,
      const HttpTls& tls = {});
  ~MetricsHttpServer();  // Stops serving.
  int port() const { return port_; }

 private:
  struct Impl;
  MetricsHttpServer();
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace summon::server::metrics

#endif  // SUMMON_SERVER_METRICS_SUMMON_METRICS_H_
