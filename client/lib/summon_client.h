#ifndef SUMMON_CLIENT_LIB_SUMMON_CLIENT_H_
#define SUMMON_CLIENT_LIB_SUMMON_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/lib/local_map.h"
#include "client/lib/slice_buffer.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::client {

class Session;

// The gRPC metadata key carrying the caller's principal. Without it the
// daemon treats the caller as "anonymous".
inline constexpr char kPrincipalMetadataKey[] = "summon-principal";

// gRPC and absl share the canonical code numbers 0..16: codes map by number
// and the message is kept.
absl::Status FromGrpcStatus(const grpc::Status& status);

struct ClientOptions {
  // Sent as `summon-principal` metadata on every call when not empty. Must
  // be printable ASCII; otherwise every call fails with INVALID_ARGUMENT.
  std::string principal;
  // Deadline of every call from its start; absl::InfiniteDuration(): none.
  // Trainer.ReportPhase adds its own wait deadline on top. Tensor streams
  // have no overall deadline: they are cancelled (DEADLINE_EXCEEDED) when
  // no chunk moved for this long.
  absl::Duration timeout = absl::Seconds(60);
  // Payload bytes per WriteTensor data message, rounded down to whole
  // elements (at least one element).
  size_t write_chunk_bytes = size_t{1} << 20;
  // TLS: the daemon's certificate is checked against `tls_root_certs` (PEM;
  // empty: the system's roots). Off: plaintext, for an --insecure-local
  // daemon on loopback or a Unix socket.
  bool tls = false;
  std::string tls_root_certs;
  // A client certificate and its key (PEM) for a daemon that requires one
  // (--tls-client-ca). Both or neither.
  std::string tls_cert_chain;
  std::string tls_private_key;
  // Sent as `authorization: Bearer <token>` on every call; TLS only (gRPC
  // refuses to send call credentials in the clear).
  std::string token;
  // While the channel is (re)connecting, calls wait for it until their
  // deadline instead of failing at once with UNAVAILABLE (gRPC's
  // wait-for-ready). For clients that must ride out a refused or slow TCP
  // connect, such as the soak's 64 clients reconnecting under load.
  bool wait_for_ready = false;
};

// Parameters of Summon.CreateModel.
struct CreateModelParams {
  std::string name;
  // The layout file's JSON text (docs/design.md#the-layout-file).
  std::string layout_json;
  // Overrides the layout's strategy when set.
  std::optional<v1::ShardingStrategy> strategy = std::nullopt;
  // Parameter values; the default InitMethod is zeros.
  v1::InitMethod init;
  // Ranks holding gradient shards. Unset: no gradients; empty: every rank.
  std::optional<std::vector<int32_t>> grad_ranks = std::nullopt;
  // Gradient values; the default InitMethod is zeros. A method set without
  // grad_ranks is INVALID_ARGUMENT: there would be no gradients to fill.
  v1::InitMethod grad_init;
};

// Which tensor of a session a ReadTensor or WriteTensor call addresses.
struct TensorRef {
  std::string session_id;
  std::string fqn;
  // The gradient instead of the parameter.
  bool grad = false;
};

struct ReadTensorParams {
  TensorRef tensor;
  // DTYPE_UNSPECIFIED: the session's read_dtype, else the stored dtype.
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  int64_t element_offset = 0;
  // Unset: up to the end of the tensor.
  std::optional<int64_t> element_count = std::nullopt;
  // Preferred chunk payload; 0: the server's default (1 MiB).
  uint32_t chunk_bytes = 0;
};

// A tensor (or an element range of it) assembled from ReadTensor's stream.
// A ReadSlices answer: where each entry lies in `packed` (16-byte aligned
// offsets), the packed bytes, and what the read moved between nodes. Read
// into a SliceBuffer, `packed` is empty: the bytes are the buffer's
// packed(), and `local_buffer` says whether the daemon wrote them there
// itself (on its host) or they came as data messages.
struct SlicesData {
  std::vector<v1::SliceLayout> entries;
  std::string packed;
  v1::ReadSlicesStats stats;
  bool local_buffer = false;
};

struct TensorData {
  // Dtype of `data`; the shape is the full tensor's.
  v1::TensorInfo info;
  int64_t element_offset = 0;
  // Whole little-endian elements from element_offset on.
  std::string data;
};

// One rule for writes (R5): a whole-tensor write carries exactly the
// tensor's shape, with no implicit reshape, broadcast or short write; a
// partial write names its element range explicitly.
struct WriteTensorParams {
  TensorRef tensor;
  // Must be the stored dtype (R5).
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  // Set: a partial write of the data's elements from this element of the
  // flattened tensor on (the server answers OUT_OF_RANGE past its end).
  // Unset: a whole-tensor write; the client looks the tensor up first and
  // refuses, with INVALID_ARGUMENT naming both shapes and before anything is
  // sent, data whose shape (or, without `shape`, element count) is not the
  // tensor's.
  std::optional<int64_t> element_offset = std::nullopt;
  // The data's shape, for a whole-tensor write. Empty: the data has the
  // tensor's shape if it has the tensor's element count.
  std::vector<int64_t> shape = {};
  // The tensor's description when the caller has it already (FindTensor):
  // the whole-tensor check uses it instead of looking the tensor up again.
  std::optional<v1::TensorInfo> tensor_info = std::nullopt;
};

// Keeps the memory of freed gRPC receive buffers in this process for reuse
// instead of handing it back to the kernel after every message. glibc trims
// an arena's free top above 128 KiB by default, so each ReadTensor message
// of a large tensor lands in freshly faulted, zeroed pages; on the 2-vCPU
// bench machine that halved the read rate (bench/RESULTS.md, P3). Sets
// M_MMAP_THRESHOLD to 4 MiB (gRPC's largest socket read) and
// M_TRIM_THRESHOLD to 16 MiB, so at most 16 MiB of freed memory per arena
// stays resident. Process-wide, so SummonClient does not do it itself:
// summonctl and summon_bench call it, and so may any program that streams
// large tensors (or it sets GLIBC_TUNABLES; docs/api.md, ReadTensor).
void TuneAllocatorForTensorStreams();

// A typed client of a summond's Summon and Trainer services. Every call
// returns the daemon's status converted by FromGrpcStatus. Copies share the
// channel; all calls are thread-safe.
class SummonClient {
 public:
  // `target` is a gRPC target: "127.0.0.1:7070", "dns:host:7070",
  // "unix:/run/summon.sock". Connects lazily, on the first call.
  explicit SummonClient(const std::string& target, ClientOptions options = {});
  SummonClient(std::shared_ptr<grpc::ChannelInterface> channel,
               ClientOptions options = {});

  const ClientOptions& options() const { return options_; }

  // Models.
  absl::StatusOr<v1::ListModelsResponse> ListModels() const;
  absl::StatusOr<v1::Model> DescribeModel(const std::string& model) const;
  absl::StatusOr<v1::Model> CreateModel(const CreateModelParams& params) const;
  // `create` set: the model is created from the checkpoint with that rule.
  absl::StatusOr<v1::LoadModelResponse> LoadModel(
      const std::string& model, const std::string& path,
      const std::optional<v1::CheckpointWrapRule>& create = std::nullopt,
      const std::string& skip = "",
      v1::DType dtype = v1::DTYPE_UNSPECIFIED) const;
  // `overwrite` replaces existing files (ALREADY_EXISTS otherwise).
  absl::StatusOr<v1::SaveModelResponse> SaveModel(const std::string& model,
                                                  const std::string& path,
                                                  uint64_t max_file_bytes = 0,
                                                  bool overwrite = false) const;
  absl::StatusOr<v1::ModelChecksumResponse> ModelChecksum(
      const std::string& model) const;
  // `force` detaches an attached trainer first (its next call fails).
  absl::StatusOr<v1::DeleteModelResponse> DeleteModel(const std::string& model,
                                                      bool force = false) const;

  // Sessions.
  absl::StatusOr<v1::Session> OpenSession(
      const std::string& model, const v1::SessionOptions& options) const;
  // Opens a session owned by the returned handle, which renews its lease and
  // closes it when destroyed (client/lib/session_handle.h defines Session).
  absl::StatusOr<std::unique_ptr<Session>> Open(
      const std::string& model, const v1::SessionOptions& options) const;
  absl::StatusOr<v1::Session> GetSession(const std::string& session_id) const;
  // Empty `model`: every model's sessions. `all`: every open session, whoever
  // holds it (operators: needs the admin role).
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(
      const std::string& model = "", bool all = false) const;

  // Watches (docs/api.md#watches).
  absl::StatusOr<v1::Watch> AddWatch(const v1::AddWatchRequest& request) const;
  absl::StatusOr<v1::ListWatchesResponse> ListWatches() const;
  absl::StatusOr<v1::RemoveWatchResponse> RemoveWatch(
      const std::string& model) const;
  absl::StatusOr<v1::ShowWatchResponse> ShowWatch(
      const v1::ShowWatchRequest& request) const;

  // The cluster as the node asked sees it (docs/api.md#getclusterstatus).
  absl::StatusOr<v1::ClusterStatus> GetClusterStatus() const;
  // Unset `lease_seconds`: the session's current lease length.
  absl::StatusOr<v1::Session> RenewSession(
      const std::string& session_id,
      std::optional<uint32_t> lease_seconds = std::nullopt) const;
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(
      const std::string& session_id, bool abort = false,
      bool force = false) const;

  // Tensors. ReadTensor concatenates the stream's chunks, checking that each
  // continues where the previous one ended and that the expected element
  // count arrived (INTERNAL otherwise). WriteTensor sends a header with the
  // element count, then `bytes` in chunks of options().write_chunk_bytes;
  // a whole-tensor write is checked against the tensor first
  // (WriteTensorParams).
  absl::StatusOr<TensorData> ReadTensor(const ReadTensorParams& params) const;
  // WriteTensor from a source of chunks: `element_count` elements are
  // declared in the header, then `next_chunk` fills each data message (whole
  // elements) until it returns false. A source error cancels the stream
  // (the server applies nothing) and is returned.
  absl::StatusOr<v1::WriteTensorResponse> WriteTensorChunks(
      const WriteTensorParams& params, int64_t element_count,
      const std::function<absl::StatusOr<bool>(std::string*)>& next_chunk)
      const;
  // The same stream, checked the same way, handed over chunk by chunk
  // instead of assembled: `on_info` once with the first chunk's description,
  // then `on_bytes` for the bytes in order, straight from gRPC's receive
  // buffers (a call may end inside an element; each chunk as a whole is
  // checked first). Memory stays at one chunk whatever the tensor's size. A
  // sink's error stops the stream and is returned.
  absl::Status ReadTensorChunks(
      const ReadTensorParams& params,
      const std::function<absl::Status(const v1::TensorInfo&)>& on_info,
      const std::function<absl::Status(absl::string_view)>& on_bytes) const;
  absl::StatusOr<v1::WriteTensorResponse> WriteTensor(
      const WriteTensorParams& params, absl::string_view bytes) const;
  // The session's description of the tensor `ref` names; a tied alias,
  // which a session lists under its primary's name, through the model's
  // aliases (one DescribeModel). nullopt when the session holds neither.
  // `session`, when not null, receives the session as GetSession gave it.
  absl::StatusOr<std::optional<v1::TensorInfo>> FindTensor(
      const TensorRef& ref, v1::Session* session = nullptr) const;
  // Empty `fqns`: every parameter of the session. Unset `histogram_bins`: the
  // server's default (16).
  absl::StatusOr<v1::TensorStatsResponse> TensorStats(
      const std::string& session_id, const std::vector<std::string>& fqns,
      bool grad = false,
      std::optional<uint32_t> histogram_bins = std::nullopt) const;

  // The same-node read path: maps a read-only session's copy (params, or
  // gradients with `grad`) read-only into this process. Only on the
  // daemon's host; FAILED_PRECONDITION otherwise and for writable sessions.
  absl::StatusOr<MappedSession> MapSession(const std::string& session_id,
                                           bool grad = false) const;
  // The grant alone: for a host copy, redeem it with RedeemMapToken (a
  // reader that preads the descriptor instead of mapping it); for a copy in
  // device memory it lists each GPU's CUDA IPC handle (device_copies)
  // unless `host_copy_only` asks for FAILED_PRECONDITION instead.
  absl::StatusOr<v1::MapSessionResponse> GrantMapSession(
      const std::string& session_id, bool grad = false,
      bool host_copy_only = false) const;

  // Weight sync (docs/api.md#weight-sync). WaitVersion waits up to
  // `timeout` (not the client's call timeout). ReadSlices checks that the
  // stream carried exactly the announced bytes (DATA_LOSS otherwise).
  absl::StatusOr<v1::PublishResponse> Publish(const std::string& model,
                                              int64_t step) const;
  absl::StatusOr<int64_t> WaitVersion(const std::string& model,
                                      int64_t min_step,
                                      absl::Duration timeout) const;
  // With `into`: the answer lands in that shared-memory buffer, written by
  // the daemon itself on its host (request.local_buffer is set for it; no
  // data messages), else copied there from the stream; its header complete
  // only after a whole answer. INVALID_ARGUMENT naming the entry when the
  // buffer is too small. A daemon whose buffer socket cannot be reached
  // from here (it looks local behind a tunnel or in another network
  // namespace) answers again as a stream, and this client (and its copies)
  // asks for the stream from then on.
  absl::StatusOr<SlicesData> ReadSlices(const v1::ReadSlicesRequest& request,
                                        SliceBuffer* into = nullptr) const;

  // Trainer. With `deadline_ms` the call's own deadline is extended by it,
  // since the daemon may wait that long for writable sessions (R3).
  absl::StatusOr<v1::ReportPhaseResponse> ReportPhase(
      const std::string& model, int32_t rank, v1::TrainingPhase phase,
      std::optional<int64_t> step = std::nullopt,
      std::optional<uint32_t> deadline_ms = std::nullopt) const;
  absl::StatusOr<v1::MapShardsResponse> MapShards(const std::string& model,
                                                  int32_t rank) const;

 private:
  // A context with the principal metadata and the deadline `extra` beyond
  // the default timeout; INVALID_ARGUMENT for a principal that gRPC metadata
  // cannot carry.
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> NewContext(
      absl::Duration extra = absl::ZeroDuration()) const;
  // A unary call that is safe to send again (a listing, a description, the
  // open of a read-only session) is sent again while a cluster on etcd
  // answers UNAVAILABLE "electing a leader", until the call's timeout
  // (at most a minute without one): the caller sees the new leader's answer
  // instead of the gap.
  template <typename Request, typename Response>
  absl::StatusOr<Response> UnaryThroughElection(
      grpc::Status (v1::Summon::Stub::*method)(grpc::ClientContext*,
                                                const Request&, Response*),
      const Request& request) const;
  // For tensor streams: no deadline; the timeout is an idle timeout instead
  // (StreamWatchdog).
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> NewStreamContext() const;

  ClientOptions options_;
  std::shared_ptr<grpc::ChannelInterface> channel_;  // For raw reads.
  std::shared_ptr<v1::Summon::Stub> summon_;
  std::shared_ptr<v1::Trainer::Stub> trainer_;
  // Cleared once the daemon's buffer socket was out of reach (ReadSlices).
  std::shared_ptr<std::atomic<bool>> local_slices_ =
      std::make_shared<std::atomic<bool>>(true);
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_SUMMON_CLIENT_H_
