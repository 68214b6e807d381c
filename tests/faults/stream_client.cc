// A client that the fault harness kills in the middle of a tensor stream.
//
//   stream_client ADDRESS read SESSION FQN
//   stream_client ADDRESS write SESSION FQN NUMEL counted|uncounted
//
// read: starts ReadTensor with small chunks and takes one chunk.
// write: sends the header (with element_count = NUMEL when "counted") and
// the first half of NUMEL float32 elements (value kWrittenValue).
// Then it prints "mid-stream" on stdout and waits, never finishing the
// stream, until it is killed. Exit code 2: bad arguments; 1: the stream
// failed before it got that far.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "summon/v1/summon.grpc.pb.h"

namespace {

constexpr float kWrittenValue = 1234.5f;
constexpr size_t kChunkBytes = 64 << 10;
constexpr int kWaitSeconds = 60;

void AnnounceAndWait() {
  std::printf("mid-stream\n");
  std::fflush(stdout);
  sleep(kWaitSeconds);
}

int Read(summon::v1::Summon::Stub& stub, const std::string& session,
         const std::string& fqn) {
  grpc::ClientContext context;
  summon::v1::ReadTensorRequest request;
  request.set_session_id(session);
  request.set_fqn(fqn);
  request.set_chunk_bytes(kChunkBytes);
  auto reader = stub.ReadTensor(&context, request);
  summon::v1::ReadTensorResponse chunk;
  if (!reader->Read(&chunk)) {
    std::fprintf(stderr, "read: the stream ended before its first chunk\n");
    return 1;
  }
  AnnounceAndWait();
  return 0;
}

int Write(summon::v1::Summon::Stub& stub, const std::string& session,
          const std::string& fqn, int64_t numel, bool counted) {
  grpc::ClientContext context;
  summon::v1::WriteTensorResponse response;
  auto writer = stub.WriteTensor(&context, &response);
  summon::v1::WriteTensorRequest header;
  header.mutable_header()->set_session_id(session);
  header.mutable_header()->set_fqn(fqn);
  header.mutable_header()->set_dtype(summon::v1::DTYPE_FLOAT32);
  if (counted) header.mutable_header()->set_element_count(numel);
  if (!writer->Write(header)) {
    std::fprintf(stderr, "write: the header was not accepted\n");
    return 1;
  }
  const std::vector<float> chunk(kChunkBytes / sizeof(float), kWrittenValue);
  for (int64_t sent = 0; sent < numel / 2;
       sent += static_cast<int64_t>(chunk.size())) {
    summon::v1::WriteTensorRequest data;
    data.set_data(chunk.data(), chunk.size() * sizeof(float));
    if (!writer->Write(data)) {
      std::fprintf(stderr, "write: the stream closed after %lld elements\n",
                   static_cast<long long>(sent));
      return 1;
    }
  }
  AnnounceAndWait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[1] == "read") {
    auto stub = summon::v1::Summon::NewStub(
        grpc::CreateChannel(args[0], grpc::InsecureChannelCredentials()));
    return Read(*stub, args[2], args[3]);
  }
  if (args.size() == 6 && args[1] == "write" &&
      (args[5] == "counted" || args[5] == "uncounted")) {
    auto stub = summon::v1::Summon::NewStub(
        grpc::CreateChannel(args[0], grpc::InsecureChannelCredentials()));
    return Write(*stub, args[2], args[3], std::atoll(args[4].c_str()),
                 args[5] == "counted");
  }
  std::fprintf(stderr,
               "usage: stream_client ADDRESS read SESSION FQN\n"
               "       stream_client ADDRESS write SESSION FQN NUMEL "
               "counted|uncounted\n");
  return 2;
}
