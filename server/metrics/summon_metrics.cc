#include "server/metrics/summon_metrics.h"

#include <thread>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace summon::server::metrics {
namespace {

// Latencies from 1 ms to about a minute.
const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> buckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
      0.5,   1,      2.5,   5,    10,    30,   60};
  return buckets;
}

}  // namespace

Registry& DefaultRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

const SummonMetrics& Summon() {
  static const SummonMetrics* metrics = [] {
    Registry& r = DefaultRegistry();
    auto* m = new SummonMetrics;
    m->session_opens = r.Counter("summon_session_opens_total",
                                 "Session opens by gRPC result.", {"result"});
    m->session_closes = r.Counter("summon_session_closes_total",
                                  "Session closes by gRPC result.", {"result"});
    m->writebacks = r.Counter(
        "summon_writebacks_total",
        "Closes of writeback sessions that were not aborts, by gRPC result.",
        {"result"});
    m->gathered_bytes = r.Counter(
        "summon_gathered_bytes_total",
        "Bytes of session copies gathered, summed over the nodes holding a "
        "copy (a shared read-only gather counted once).");
    m->read_bytes = r.Counter("summon_read_bytes_total",
                              "Bytes sent by ReadTensor streams.");
    m->written_bytes = r.Counter("summon_written_bytes_total",
                                 "Bytes applied by WriteTensor streams.");
    m->gather_seconds = r.Histogram(
        "summon_gather_duration_seconds",
        "Time to open a session (the gather), successful opens only.",
        LatencyBuckets());
    m->read_seconds = r.Histogram("summon_read_duration_seconds",
                                  "Time of a ReadTensor stream.",
                                  LatencyBuckets());
    m->writeback_seconds = r.Histogram(
        "summon_writeback_duration_seconds",
        "Time of a writeback close (PREPARE and COMMIT).", LatencyBuckets());
    return m;
  }();
  return *metrics;
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

double SecondsSince(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

struct MetricsHttpServer::Impl {
  std::unique_ptr<httplib::Server> http;  // an httplib::SSLServer with TLS
  std::thread thread;
};

MetricsHttpServer::MetricsHttpServer() : impl_(std::make_unique<Impl>()) {}

MetricsHttpServer::~MetricsHttpServer() {
  if (impl_->http != nullptr) impl_->http->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen_address,
    const std::function<void(httplib::Server&)>& routes, const HttpTls& tls) {
  const size_t colon = listen_address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen_address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen needs HOST:PORT, got '", listen_address, "'"));
  }
  std::string host = listen_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  Summon();  // Every family is listed from the first scrape on.
  auto server = absl::WrapUnique(new MetricsHttpServer());
  if (tls.enabled()) {
    // The gRPC port's certificate (--tls-cert/--tls-key). No client
    // certificate is asked for even with --tls-client-ca: browsers and
    // scrapers identify with tokens (docs/api.md "The web view and /api/").
    auto https =
        std::make_unique<httplib::SSLServer>(tls.cert.c_str(), tls.key.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the HTTPS metrics listener cannot load --tls-cert ", tls.cert,
          " and --tls-key ", tls.key));
    }
    server->impl_->http = std::move(https);
  } else {
    server->impl_->http = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *server->impl_->http;
  http.Get("/metrics", [](const httplib::Request&,
                                         httplib::Response& response) {
    response.set_content(DefaultRegistry().Render(),
                         "text/plain; version=0.0.4; charset=utf-8");
  });
  if (routes) routes(http);
  if (port == 0) {
    server->port_ = http.bind_to_any_port(host.c_str());
  } else if (http.bind_to_port(host.c_str(), port)) {
    server->port_ = port;
  } else {
    server->port_ = -1;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", listen_address));
  }
  Impl* impl = server->impl_.get();
  impl->thread = std::thread([impl] { impl->http->listen_after_bind(); });
  return server;
}

}  // namespace summon::server::metrics
