#include "client/files/npy.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace summon::client {
namespace {

using core::DType;

// The 10 bytes before the header dict of a version 1.0 file whose header
// (dict, padding and newline) is `header_size` bytes long.
std::string Prefix(size_t header_size) {
  std::string prefix("\x93NUMPY\x01\x00", 8);
  prefix.push_back(static_cast<char>(header_size & 0xFF));
  prefix.push_back(static_cast<char>(header_size >> 8));
  return prefix;
}

// A version 1.0 file around an arbitrary header dict text (unpadded).
std::string FileWithHeader(const std::string& dict, const std::string& data) {
  return Prefix(dict.size() + 1) + dict + "\n" + data;
}

std::string HeaderOf(const std::string& file) {
  const size_t size = static_cast<unsigned char>(file[8]) |
                      static_cast<size_t>(static_cast<unsigned char>(file[9]))
                          << 8;
  return file.substr(10, size);
}

TEST(NpyTest, EncodesAFloat32VectorByteForByte) {
  NpyArray array{
      DType::kFloat32,
      {3},
      std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x00\xbf", 12)};
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  ASSERT_EQ(dict.size(), 57u);
  // 10 + 57 + 1 = 68 bytes pad with 60 spaces to 128: the data starts
  // 64-byte aligned, and the header length field says 57 + 60 + 1 = 118.
  const std::string expected =
      Prefix(118) + dict + std::string(60, ' ') + "\n" + array.data;
  absl::StatusOr<std::string> encoded = EncodeNpy(array);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(*encoded, expected);
  EXPECT_EQ(encoded->size(), 140u);
}

TEST(NpyTest, HeaderPadsTheDataStartToAMultipleOf64EndingInNewline) {
  const core::Shape shapes[] = {
      {}, {0}, {7}, {2, 3}, {1, 2, 1, 3, 1, 1, 1, 10, 1, 11, 1, 12}};
  for (const core::Shape& shape : shapes) {
    NpyArray array{DType::kFloat64, shape, ""};
    absl::StatusOr<int64_t> numel = core::NumElements(shape);
    ASSERT_TRUE(numel.ok());
    array.data.assign(static_cast<size_t>(*numel) * 8, '\0');
    absl::StatusOr<std::string> encoded = EncodeNpy(array);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    const std::string header = HeaderOf(*encoded);
    EXPECT_EQ((10 + header.size()) % 64, 0u) << core::ShapeToString(shape);
    EXPECT_EQ(header.back(), '\n') << core::ShapeToString(shape);
    EXPECT_EQ(encoded->size(), 10 + header.size() + array.data.size());
  }
}

TEST(NpyTest, ShapesAreWrittenAsPythonTuples) {
  const struct {
    core::Shape shape;
    std::string tuple;
  } cases[] = {{{}, "()"}, {{4}, "(4,)"}, {{2, 3}, "(2, 3)"}};
  for (const auto& c : cases) {
    absl::StatusOr<int64_t> numel = core::NumElements(c.shape);
    ASSERT_TRUE(numel.ok());
    NpyArray array{DType::kFloat16, c.shape,
                   std::string(static_cast<size_t>(*numel) * 2, '\0')};
    absl::StatusOr<std::string> encoded = EncodeNpy(array);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(HeaderOf(*encoded).find("{'descr': '<f2', 'fortran_order': "
                                      "False, 'shape': " +
                                      c.tuple + ", }"),
              0u)
        << c.tuple;
  }
}

TEST(NpyTest, EveryDTypeRoundTripsWithItsDescriptor) {
  const struct {
    DType dtype;
    std::string descr;
    size_t element_size;
  } cases[] = {{DType::kFloat32, "'<f4'", 4},
               {DType::kFloat64, "'<f8'", 8},
               {DType::kFloat16, "'<f2'", 2},
               {DType::kBFloat16, "'<u2'", 2}};
  for (const auto& c : cases) {
    NpyArray array{c.dtype, {2, 2}, ""};
    for (size_t i = 0; i < 4 * c.element_size; ++i) {
      array.data.push_back(static_cast<char>(i * 7 + 1));
    }
    absl::StatusOr<std::string> encoded = EncodeNpy(array);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_NE(HeaderOf(*encoded).find(c.descr), std::string::npos) << c.descr;
    absl::StatusOr<NpyArray> decoded = DecodeNpy(*encoded);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->dtype, c.dtype) << c.descr;
    EXPECT_EQ(decoded->shape, core::Shape({2, 2})) << c.descr;
    EXPECT_EQ(decoded->data, array.data) << c.descr;
  }
}

TEST(NpyTest, DecodesNumPyHeaderVariants) {
  // Double quotes, extra spaces (NumPy leaves room to grow the first axis),
  // no trailing comma, keys in another order.
  const std::string data(8, '\x01');
  absl::StatusOr<NpyArray> decoded = DecodeNpy(FileWithHeader(
      "{\"shape\": (2,  ),\"fortran_order\":False, \"descr\": \"<f4\"}     ",
      data));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->dtype, DType::kFloat32);
  EXPECT_EQ(decoded->shape, core::Shape({2}));
  EXPECT_EQ(decoded->data, data);
}

TEST(NpyTest, DecodesFormatVersion2) {
  const std::string dict =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n";
  std::string file("\x93NUMPY\x02\x00", 8);
  file.push_back(static_cast<char>(dict.size()));
  file.append(3, '\0');
  file += dict + std::string(8, '\x02');
  absl::StatusOr<NpyArray> decoded = DecodeNpy(file);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->dtype, DType::kFloat64);
  EXPECT_EQ(decoded->data, std::string(8, '\x02'));
}

// Every malformed input is INVALID_ARGUMENT with `reason` in the message.
void ExpectRejected(const std::string& bytes, const std::string& reason) {
  absl::StatusOr<NpyArray> decoded = DecodeNpy(bytes);
  ASSERT_FALSE(decoded.ok()) << reason;
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
      << decoded.status();
  EXPECT_NE(decoded.status().message().find(reason), std::string::npos)
      << decoded.status();
}

TEST(NpyTest, RejectsBadMagicAndVersion) {
  ExpectRejected("", "bad magic");
  ExpectRejected("\x93NUMP", "bad magic");
  ExpectRejected(std::string("\x93NUMPZ\x01\x00\x00\x00", 10), "bad magic");
  ExpectRejected(std::string("\x93NUMPY\x04\x00\x00\x00", 10),
                 "unsupported format version 4");
  ExpectRejected(std::string("\x93NUMPY\x01\x00\x05", 9),
                 "truncated header length");
  ExpectRejected(Prefix(200) + "{}", "runs past the end");
}

TEST(NpyTest, RejectsMalformedHeaderDicts) {
  const std::string f4 = "'descr': '<f4'";
  const std::string order = "'fortran_order': False";
  ExpectRejected(FileWithHeader("[]", ""), "expected '{'");
  ExpectRejected(FileWithHeader("{" + f4 + ", 'shape': (1,)}", "abcd"),
                 "are required");
  ExpectRejected(
      FileWithHeader("{" + f4 + ", " + order + ", 'shape': (1,), 'extra': 1}",
                     "abcd"),
      "unexpected or repeated key 'extra'");
  ExpectRejected(FileWithHeader("{" + f4 + ", " + f4 + "}", ""),
                 "unexpected or repeated key 'descr'");
  ExpectRejected(FileWithHeader("{'descr: '<f4'}", ""), "expected ':'");
  ExpectRejected(FileWithHeader("{'descr", ""), "unclosed string");
  ExpectRejected(
      FileWithHeader("{" + f4 + ", 'fortran_order': 0, 'shape': ()}", ""),
      "must be True or False");
  ExpectRejected(FileWithHeader("{" + f4 + ", " + order + ", 'shape': 3}", ""),
                 "'shape' must be a tuple");
  ExpectRejected(
      FileWithHeader("{" + f4 + ", " + order + ", 'shape': (-1,)}", ""),
      "non-negative integers");
  ExpectRejected(
      FileWithHeader("{" + f4 + ", " + order + ", 'shape': (1 2)}", ""),
      "expected ',' or ')'");
  ExpectRejected(
      FileWithHeader("{" + f4 + ", " + order + ", 'shape': ()} x", "abcd"),
      "text after the dict");
  ExpectRejected(
      FileWithHeader("{" + f4 + " " + order + ", 'shape': ()}", "abcd"),
      "expected ',' or '}'");
  ExpectRejected(
      FileWithHeader(
          "{" + f4 + ", " + order + ", 'shape': (99999999999999999999,)}", ""),
      "non-negative integers");
}

TEST(NpyTest, RejectsFortranOrder) {
  ExpectRejected(FileWithHeader("{'descr': '<f4', 'fortran_order': True, "
                                "'shape': (1,), }",
                                "abcd"),
                 "fortran_order True");
}

TEST(NpyTest, RejectsOtherDescriptors) {
  for (const std::string descr : {"<i4", ">f4", "|u1", "<f16", "<c8"}) {
    ExpectRejected(FileWithHeader("{'descr': '" + descr +
                                      "', 'fortran_order': False, "
                                      "'shape': (1,), }",
                                  std::string(16, '\0')),
                   "unsupported descr '" + descr + "'");
  }
}

TEST(NpyTest, RejectsDataSizeOtherThanTheShapes) {
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  ExpectRejected(FileWithHeader(dict, std::string(15, '\0')),
                 "needs 4 elements, the file holds 15 data bytes");
  ExpectRejected(FileWithHeader(dict, std::string(17, '\0')),
                 "needs 4 elements, the file holds 17 data bytes");
  // A shape whose byte size overflows must not wrap around to a small size.
  ExpectRejected(FileWithHeader("{'descr': '<f8', 'fortran_order': False, "
                                "'shape': (2305843009213693952,), }",
                                ""),
                 "needs 2305843009213693952 elements");
  absl::StatusOr<NpyArray> overflow =
      DecodeNpy(FileWithHeader("{'descr': '<f4', 'fortran_order': False, "
                               "'shape': (4294967296, 4294967296), }",
                               ""));
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, EncodeRejectsWrongDataSizeAndIntegerDTypes) {
  absl::StatusOr<std::string> short_data =
      EncodeNpy({DType::kFloat32, {2}, std::string(7, '\0')});
  EXPECT_EQ(short_data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(short_data.status().message(),
            "npy: shape [2] of float32 needs 8 bytes, got 7");
  absl::StatusOr<std::string> integer =
      EncodeNpy({DType::kInt32, {1}, std::string(4, '\0')});
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, FilesRoundTripAndMissingFilesAreNotFound) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/roundtrip.npy";
  const NpyArray array{DType::kBFloat16,
                       {3},
                       std::string("\x80\x3f\x00\x40"
                                   "\x00\xbf",
                                   6)};
  ASSERT_TRUE(WriteNpyFile(path, array).ok());
  absl::StatusOr<NpyArray> read = ReadNpyFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->dtype, DType::kBFloat16);
  EXPECT_EQ(read->shape, core::Shape({3}));
  EXPECT_EQ(read->data, array.data);

  absl::StatusOr<NpyArray> missing = ReadNpyFile(path + ".missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path + ".missing"),
            std::string::npos);
}

}  // namespace
}  // namespace summon::client
