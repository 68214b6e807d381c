#include "proto/read_chunk_wire.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/wire_test_buffers.h"

namespace summon::wire {
namespace {

v1::TensorInfo Info() {
  v1::TensorInfo info;
  info.set_fqn("layers.0.w");
  info.set_dtype(v1::DTYPE_FLOAT32);
  info.add_shape(3);
  info.add_shape(5);
  info.set_numel(15);
  return info;
}

TEST(ReadChunkWire, PinnedDataIsSentFromTheCallersMemoryAndReleasedAfter) {
  auto memory = std::make_shared<std::string>("0123456789abcdefghij");
  const absl::string_view bytes(*memory);
  ReadChunkView chunk;
  {
    const v1::TensorInfo info = Info();
    grpc::ByteBuffer message = EncodeReadChunk(&info, 40, bytes, memory);
    EXPECT_EQ(memory.use_count(), 2);
    ASSERT_TRUE(DecodeReadChunk(message, &chunk).ok());
  }
  ASSERT_TRUE(chunk.has_info);
  EXPECT_EQ(chunk.info.fqn(), "layers.0.w");
  EXPECT_EQ(chunk.info.numel(), 15);
  EXPECT_EQ(chunk.info.shape_size(), 2);
  EXPECT_EQ(chunk.element_offset, 40);
  EXPECT_EQ(chunk.data_bytes, 20);
  ASSERT_EQ(chunk.data.size(), 1u);
  // No copy: the piece is the caller's memory.
  EXPECT_EQ(chunk.data[0].data(), memory->data());
  EXPECT_EQ(chunk.data[0], "0123456789abcdefghij");
  // The received view still references the slice, hence the pin.
  EXPECT_EQ(memory.use_count(), 2);
  chunk = ReadChunkView();
  EXPECT_EQ(memory.use_count(), 1);
}

TEST(ReadChunkWire, UnpinnedDataIsCopiedOnce) {
  std::string memory = "abcdefgh";
  grpc::ByteBuffer message = EncodeReadChunk(nullptr, 7, memory, nullptr);
  memory.assign("XXXXXXXX");
  ReadChunkView chunk;
  ASSERT_TRUE(DecodeReadChunk(message, &chunk).ok());
  EXPECT_FALSE(chunk.has_info);
  EXPECT_EQ(chunk.element_offset, 7);
  EXPECT_EQ(Joined(chunk.data), "abcdefgh");
}

TEST(ReadChunkWire, EncodedMessageIsAnOrdinaryReadTensorResponse) {
  const v1::TensorInfo info = Info();
  const std::string data(1000, '\x5a');
  v1::ReadTensorResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(
      Flat(EncodeReadChunk(&info, 123456789012LL, data, nullptr))));
  EXPECT_EQ(parsed.info().fqn(), "layers.0.w");
  EXPECT_EQ(parsed.element_offset(), 123456789012LL);
  EXPECT_EQ(parsed.data(), data);

  ASSERT_TRUE(parsed.ParseFromString(Flat(EncodeReadChunk(
      nullptr, 0, absl::string_view(), std::make_shared<int>(1)))));
  EXPECT_FALSE(parsed.has_info());
  EXPECT_EQ(parsed.element_offset(), 0);
  EXPECT_EQ(parsed.data(), "");
}

TEST(ReadChunkWire, DecodesProtobufsOwnEncodingCutAtAnyByte) {
  v1::ReadTensorResponse message;
  *message.mutable_info() = Info();
  message.set_element_offset(300);
  std::string data;
  for (int i = 0; i < 4096; ++i) data.push_back(static_cast<char>(i * 7));
  message.set_data(data);
  const std::string wire = message.SerializeAsString();
  for (size_t size : {1, 2, 3, 7, 16, 4095, 4096, 100000}) {
    ReadChunkView chunk;
    ASSERT_TRUE(DecodeReadChunk(Sliced(wire, size), &chunk).ok()) << size;
    EXPECT_TRUE(chunk.has_info);
    EXPECT_EQ(chunk.info.fqn(), "layers.0.w");
    EXPECT_EQ(chunk.element_offset, 300) << size;
    EXPECT_EQ(chunk.data_bytes, 4096);
    EXPECT_EQ(Joined(chunk.data), data) << size;
    // gRPC may merge tiny slices, but data cut smaller than itself comes
    // in several pieces.
    if (size < 4096) {
      EXPECT_GT(chunk.data.size(), 1u) << size;
    }
  }
}

TEST(ReadChunkWire, MergesRepeatedFieldsAndSkipsUnknownOnes) {
  v1::ReadTensorResponse first;
  first.mutable_info()->set_fqn("a");
  first.set_data("old");
  v1::ReadTensorResponse second;
  second.mutable_info()->set_numel(9);
  second.set_element_offset(5);
  second.set_data("new!");
  // Unknown fields: 9 varint, 10 fixed32, 11 fixed64, 12 bytes.
  const std::string unknown =
      std::string("\x48\x96\x01", 3) + std::string("\x55\x01\x02\x03\x04", 5) +
      std::string("\x59\x01\x02\x03\x04\x05\x06\x07\x08", 9) +
      std::string("\x62\x02hi", 4);
  const std::string wire =
      first.SerializeAsString() + unknown + second.SerializeAsString();
  ReadChunkView chunk;
  ASSERT_TRUE(DecodeReadChunk(Sliced(wire, 5), &chunk).ok());
  EXPECT_EQ(chunk.info.fqn(), "a");
  EXPECT_EQ(chunk.info.numel(), 9);
  EXPECT_EQ(chunk.element_offset, 5);
  EXPECT_EQ(Joined(chunk.data), "new!");
  EXPECT_EQ(chunk.data_bytes, 4);
}

TEST(ReadChunkWire, MalformedMessagesAreInternalErrorsNamingTheDefect) {
  const struct {
    std::string wire;
    const char* defect;
  } cases[] = {
      {std::string("\x10\x96", 2), "truncated varint"},
      {std::string("\x1a\x05"
                   "abc",
                   5),
       "field 3 runs past the message"},
      {std::string("\x1a", 1), "truncated length"},
      {std::string("\x0b", 1), "wire type 3"},
      {std::string("\x0e", 1), "wire type 6"},
      {std::string("\x00\x01", 2), "field number 0"},
      {std::string("\x0a\x02\xff\xff", 4), "tensor info does not parse"},
      {std::string("\x90\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80", 11),
       "truncated field key"},
  };
  for (const auto& c : cases) {
    ReadChunkView chunk;
    const absl::Status status = DecodeReadChunk(Sliced(c.wire, 1), &chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << c.defect;
    EXPECT_EQ(status.message(),
              std::string("malformed ReadTensor message: ") + c.defect);
  }
}

}  // namespace
}  // namespace summon::wire
