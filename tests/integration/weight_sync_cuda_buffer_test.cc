// ReadSlices into a caller's CUDA buffer (weight_sync.proto, cuda_buffer)
// on one in-process summond whose CUDA IPC destinations are faked in host
// memory (server/testing/fake_slice_destinations.h): the packed answer
// lands byte for byte as the stream carries it (rows, columns, dtype
// conversions, zero gaps) at the buffer's offset, no data messages; a
// buffer too small, a buffer asked for twice, a missing device and a
// daemon without CUDA delivery are refused before anything is written.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"
#include "server/testing/fake_slice_destinations.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

struct Entry {
  std::string fqn;
  std::vector<std::pair<int64_t, int64_t>> box;
  pb::DType dtype;
};

// Rows, columns, float32 to bfloat16 (10 bytes, a 6-byte gap), float32 to
// float64, across kBlocksLayout's uneven rank boundaries.
const std::vector<Entry>& Entries() {
  static const auto* entries = new std::vector<Entry>{
      {"embed.w", {{3, 4}, {0, 4}}, pb::DTYPE_UNSPECIFIED},
      {"layers.1.w", {{0, 7}, {2, 2}}, pb::DTYPE_FLOAT32},
      {"norm.w", {{0, 5}}, pb::DTYPE_BFLOAT16},
      {"layers.0.attn.w", {{1, 3}, {1, 3}}, pb::DTYPE_FLOAT64}};
  return *entries;
}

// Entry i's packed offsets and bytes: 64, 56 (+8 gap), 10 (+6), 72.
constexpr int64_t kOffsets[] = {0, 64, 128, 144};
constexpr int64_t kBytes[] = {64, 56, 10, 72};
constexpr int64_t kTotal = 216;

pb::ReadSlicesRequest Request() {
  pb::ReadSlicesRequest request;
  request.set_model("m");
  request.set_version(1);
  for (const Entry& entry : Entries()) {
    pb::SliceEntry* wire = request.add_entries();
    wire->set_fqn(entry.fqn);
    wire->set_dtype(entry.dtype);
    for (const auto& [start, length] : entry.box) {
      pb::SliceRange* range = wire->add_box();
      range->set_start(start);
      range->set_length(length);
    }
  }
  return request;
}

// The packed answer computed here from the seeded init.
std::string ExpectedPacked() {
  const TensorValues seeded = SeededBlocks();
  std::string packed(kTotal, '\0');
  auto put = [&packed](int64_t at, const void* data, size_t bytes) {
    std::memcpy(packed.data() + at, data, bytes);
  };
  const std::vector<float>& embed = seeded.at("embed.w");  // [10, 4]
  put(kOffsets[0], embed.data() + 3 * 4, 16 * 4);
  const std::vector<float>& l1 = seeded.at("layers.1.w");  // [7, 5]
  for (int r = 0; r < 7; ++r) put(kOffsets[1] + r * 8, &l1[r * 5 + 2], 8);
  const std::vector<float>& norm = seeded.at("norm.w");
  for (int i = 0; i < 5; ++i) {
    const uint16_t bits = core::FloatToBFloat16(norm[i]);
    put(kOffsets[2] + i * 2, &bits, 2);
  }
  const std::vector<float>& attn = seeded.at("layers.0.attn.w");  // [5, 5]
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      const double value = attn[(1 + r) * 5 + 1 + c];
      put(kOffsets[3] + (r * 3 + c) * 8, &value, 8);
    }
  }
  return packed;
}

struct Answer {
  grpc::Status status;
  std::vector<pb::ReadSlicesResponse> messages;
};

class WeightSyncCudaBufferTest : public SummondTest {
 protected:
  // A daemon of 4 ranks with version 1 of the seeded "m" published; CUDA
  // delivery through `devices` (null: none).
  void Start(std::shared_ptr<server::FakeSliceDestinations> devices) {
    devices_ = devices;
    slice_devices_ = devices;
    ASSERT_NO_FATAL_FAILURE(StartServer(/*local_ranks=*/4));
    CreateSeeded("m");
    grpc::ClientContext context;
    pb::PublishRequest publish;
    publish.set_model("m");
    publish.set_step(1);
    pb::PublishResponse published;
    ASSERT_TRUE(summon_->Publish(&context, publish, &published).ok());
  }

  Answer Read(const pb::ReadSlicesRequest& request) {
    grpc::ClientContext context;
    auto reader = summon_->ReadSlices(&context, request);
    Answer answer;
    pb::ReadSlicesResponse message;
    while (reader->Read(&message)) answer.messages.push_back(message);
    answer.status = reader->Finish();
    return answer;
  }

  static pb::ReadSlicesRequest IntoCuda(const std::string& handle,
                                        int64_t offset, int64_t bytes,
                                        int device = 0) {
    pb::ReadSlicesRequest request = Request();
    pb::CudaIpcBuffer* buffer = request.mutable_cuda_buffer();
    buffer->set_device(device);
    buffer->set_ipc_handle(handle);
    buffer->set_offset(offset);
    buffer->set_bytes(bytes);
    return request;
  }

  std::shared_ptr<server::FakeSliceDestinations> devices_;
};

std::string AsString(const std::vector<uint8_t>& bytes, size_t from,
                     size_t count) {
  return std::string(reinterpret_cast<const char*>(bytes.data()) + from, count);
}

TEST_F(WeightSyncCudaBufferTest, ThePackedAnswerLandsAtTheBuffersOffset) {
  Start(std::make_shared<server::FakeSliceDestinations>());
  const std::string handle = devices_->Allocate(0, 1024, 0xAB);
  const Answer answer = Read(IntoCuda(handle, 100, 400));
  ASSERT_TRUE(answer.status.ok()) << answer.status.error_message();
  // The layout, then the stats: no data messages.
  ASSERT_EQ(answer.messages.size(), 2u);
  const pb::ReadSlicesResponse& header = answer.messages[0];
  EXPECT_EQ(header.total_bytes(), kTotal);
  ASSERT_EQ(header.entries_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(header.entries(i).offset(), kOffsets[i]) << "entry " << i;
    EXPECT_EQ(header.entries(i).bytes(), kBytes[i]) << "entry " << i;
  }
  EXPECT_EQ(header.entries(2).dtype(), pb::DTYPE_BFLOAT16);
  EXPECT_EQ(header.entries(3).dtype(), pb::DTYPE_FLOAT64);
  EXPECT_TRUE(header.buffer_token().empty());
  ASSERT_TRUE(answer.messages[1].has_stats());
  EXPECT_TRUE(answer.messages[1].stats().cuda_buffer());
  EXPECT_EQ(answer.messages[1].stats().slice_bytes(), 64 + 56 + 10 + 72);
  EXPECT_EQ(answer.messages[1].stats().peer_bytes(), 0);

  const std::vector<uint8_t> memory = devices_->Bytes(handle);
  EXPECT_EQ(AsString(memory, 100, kTotal), ExpectedPacked());
  EXPECT_EQ(AsString(memory, 0, 100), std::string(100, '\xAB'));
  EXPECT_EQ(AsString(memory, 100 + kTotal, 1024 - 100 - kTotal),
            std::string(1024 - 100 - kTotal, '\xAB'));
  EXPECT_EQ(devices_->writes(), 1);  // One window: the answer is small.

  // The stream carries the same bytes, and says it streamed.
  const Answer streamed = Read(Request());
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_EQ(streamed.messages.size(), 3u);
  EXPECT_EQ(streamed.messages[1].data(), ExpectedPacked());
  EXPECT_FALSE(streamed.messages[2].stats().cuda_buffer());
}

TEST_F(WeightSyncCudaBufferTest, ABufferTooSmallIsRefusedNamingTheEntry) {
  Start(std::make_shared<server::FakeSliceDestinations>());
  const std::string handle = devices_->Allocate(0, 1024, 0xAB);
  // Entry 3 ends at 216; entry 2 at 138.
  const Answer answer = Read(IntoCuda(handle, 0, 200));
  EXPECT_CODE(answer.status, INVALID_ARGUMENT);
  EXPECT_EQ(answer.status.error_message(),
            "entry 3 ('layers.0.attn.w'): ends at byte 216 of the CUDA "
            "buffer, which has 200 bytes (the answer needs 216: the packed "
            "entries)");
  EXPECT_TRUE(answer.messages.empty());
  EXPECT_EQ(devices_->writes(), 0);
  EXPECT_EQ(devices_->Bytes(handle), std::vector<uint8_t>(1024, 0xAB));

  // A capacity past the allocation's end: the destination refuses.
  const Answer past = Read(IntoCuda(handle, 900, 216));
  EXPECT_CODE(past.status, INVALID_ARGUMENT);
  EXPECT_EQ(past.status.error_message(),
            "cuda_buffer: bytes [900, 1116) pass the end of the shared CUDA "
            "allocation, which has 1024 bytes");
  // A handle that is not one.
  const Answer short_handle = Read(IntoCuda("handle", 0, 1024));
  EXPECT_CODE(short_handle.status, INVALID_ARGUMENT);
  EXPECT_EQ(short_handle.status.error_message(),
            "cuda_buffer.ipc_handle has 6 bytes; a CUDA IPC handle "
            "(cudaIpcMemHandle_t) has 64");
  EXPECT_EQ(devices_->writes(), 0);
  EXPECT_EQ(devices_->Bytes(handle), std::vector<uint8_t>(1024, 0xAB));
}

TEST_F(WeightSyncCudaBufferTest, TwoDestinationsAtOnceAreRefused) {
  Start(std::make_shared<server::FakeSliceDestinations>());
  const std::string handle = devices_->Allocate(0, 1024, 0xAB);
  pb::ReadSlicesRequest request = IntoCuda(handle, 0, 1024);
  request.set_local_buffer(true);
  const Answer answer = Read(request);
  EXPECT_CODE(answer.status, INVALID_ARGUMENT);
  EXPECT_EQ(answer.status.error_message(),
            "local_buffer and cuda_buffer are two destinations; ask for one");
  EXPECT_TRUE(answer.messages.empty());
  EXPECT_EQ(devices_->writes(), 0);
  EXPECT_EQ(devices_->Bytes(handle), std::vector<uint8_t>(1024, 0xAB));
}

TEST_F(WeightSyncCudaBufferTest,
       WithoutTheDeviceTheReadIsRefusedAndTheDaemonServes) {
  Start(std::make_shared<server::FakeSliceDestinations>(/*devices=*/1));
  const std::string handle = devices_->Allocate(0, 1024, 0xAB);
  const Answer answer = Read(IntoCuda(handle, 0, 1024, /*device=*/1));
  EXPECT_CODE(answer.status, FAILED_PRECONDITION);
  EXPECT_EQ(answer.status.error_message(),
            "cuda_buffer: no CUDA device 1 on the daemon's host (1 CUDA "
            "device(s) visible); read through local_buffer or the stream "
            "instead");
  EXPECT_TRUE(answer.messages.empty());
  EXPECT_EQ(devices_->writes(), 0);
  const Answer streamed = Read(Request());
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  EXPECT_EQ(streamed.messages[1].data(), ExpectedPacked());
}

TEST_F(WeightSyncCudaBufferTest, ADaemonWithoutCudaDeliveryRefusesIt) {
  Start(nullptr);
  const Answer answer = Read(IntoCuda(std::string(64, 'h'), 0, 1024));
  EXPECT_CODE(answer.status, FAILED_PRECONDITION);
  EXPECT_EQ(answer.status.error_message(),
            "cuda_buffer: this daemon does not deliver into CUDA buffers; "
            "read through local_buffer or the stream instead");
  EXPECT_TRUE(answer.messages.empty());
}

}  // namespace
}  // namespace summon::tests
