#include "server/checkpoint/safetensors.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string MakeTempDir() {
  std::string pattern = testing::TempDir() + "/safetensors_XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string LengthPrefix(uint64_t length) {
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  return prefix;
}

// A file with `header_json` as its header and `data_bytes` zero bytes after.
std::string FileWithHeader(const std::string& header_json, size_t data_bytes) {
  return LengthPrefix(header_json.size()) + header_json +
         std::string(data_bytes, '\0');
}

SafetensorsHeader TwoTensorHeader() {
  SafetensorsHeader header;
  header.metadata = {{"format", "pt"}, {"step", "7"}};
  // "z" first: the header keeps the caller's order, not name order.
  header.entries.push_back(
      {"z.weight", core::DType::kFloat32, {2, 3}, 6, 0, 24});
  header.entries.push_back({"a.bias", core::DType::kBFloat16, {5}, 5, 24, 34});
  return header;
}

TEST(SerializeSafetensorsHeaderTest, RoundTripsThroughTheParser) {
  const SafetensorsHeader header = TwoTensorHeader();
  const std::string serialized = SerializeSafetensorsHeader(header);
  ASSERT_EQ(serialized.size() % 8, 0u);
  ASSERT_EQ(serialized.substr(0, 8), LengthPrefix(serialized.size() - 8));
  EXPECT_EQ(serialized[8], '{');
  absl::StatusOr<SafetensorsHeader> parsed = ParseSafetensorsHeader(
      absl::string_view(serialized).substr(8), serialized.size() + 34);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data_start, static_cast<int64_t>(serialized.size()));
  EXPECT_THAT(parsed->metadata,
              ElementsAre(Pair("format", "pt"), Pair("step", "7")));
  ASSERT_EQ(parsed->entries.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const SafetensorsEntry& want = header.entries[i];
    const SafetensorsEntry& got = parsed->entries[i];
    EXPECT_EQ(got.name, want.name) << i;
    EXPECT_EQ(got.dtype, want.dtype) << i;
    EXPECT_EQ(got.shape, want.shape) << i;
    EXPECT_EQ(got.numel, want.numel) << i;
    EXPECT_EQ(got.begin, want.begin) << i;
    EXPECT_EQ(got.end, want.end) << i;
  }
  EXPECT_EQ(parsed->Find("a.bias"), &parsed->entries[1]);
  EXPECT_EQ(parsed->Find("missing"), nullptr);
}

TEST(SerializeSafetensorsHeaderTest, PadsWithSpacesAndOmitsEmptyMetadata) {
  SafetensorsHeader header;
  header.entries.push_back({"w", core::DType::kFloat64, {}, 1, 0, 8});
  const std::string serialized = SerializeSafetensorsHeader(header);
  const std::string json =
      R"({"w":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})";
  ASSERT_GE(serialized.size(), 8 + json.size());
  EXPECT_EQ(serialized.substr(8, json.size()), json);
  EXPECT_EQ(serialized.substr(8 + json.size()),
            std::string(serialized.size() - 8 - json.size(), ' '));
  EXPECT_EQ(serialized.size(), (8 + json.size() + 7) / 8 * 8);
}

TEST(ReadSafetensorsHeaderTest, ReadsAFileWrittenByHand) {
  const std::string path = MakeTempDir() + "/m.safetensors";
  WriteFile(path,
            FileWithHeader(
                R"({"__metadata__":{"k":"v"},)"
                R"("s":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                R"("e":{"dtype":"F16","shape":[0,3],"data_offsets":[8,8]},)"
                R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                16));
  absl::StatusOr<SafetensorsHeader> header =
      ReadSafetensorsHeaderFromFile(path);
  ASSERT_TRUE(header.ok()) << header.status();
  ASSERT_EQ(header->entries.size(), 3u);
  EXPECT_EQ(header->entries[0].name, "s");
  EXPECT_EQ(header->entries[0].dtype, core::DType::kInt64);
  EXPECT_EQ(header->entries[0].numel, 1);  // A scalar.
  EXPECT_EQ(header->entries[1].numel, 0);  // Empty: shares an offset freely.
  EXPECT_EQ(header->entries[2].begin, 0);
  EXPECT_EQ(header->metadata.at("k"), "v");
}

struct MalformedCase {
  std::string name;
  std::string file;
  std::string message;  // A part of the error message.
};

std::string Tensor(const std::string& name, const std::string& body) {
  return absl::StrCat("\"", name, "\":{", body, "}");
}

std::vector<MalformedCase> MalformedCases() {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],)";
  auto header = [](const std::string& json, size_t data = 16) {
    return FileWithHeader(json, data);
  };
  return {
      {"ShorterThanLengthPrefix", std::string("\x04\0\0", 3),
       "at least 8 bytes"},
      {"LengthBeyondFile", LengthPrefix(100) + "{}", "exceeds the file"},
      {"LengthOverflowsInt64", LengthPrefix(~uint64_t{0}) + "{}",
       "exceeds the file"},
      {"NotJson", header("{\"w\":"), "not valid JSON"},
      {"TrailingGarbage", header("{} x"), "not valid JSON"},
      {"InvalidUtf8Name", header("{\"\xff\":{}}"), "not valid JSON"},
      {"NotAnObject", header("[1,2]"), "expected an object"},
      {"TensorNotAnObject", header(R"({"w":[0,8]})"), "tensor 'w'"},
      {"MissingDtype",
       header("{" + Tensor("w", R"("shape":[2],"data_offsets":[0,8])") + "}"),
       "tensor 'w': field 'dtype'"},
      {"DtypeNotAString",
       header("{" +
              Tensor("w", R"("dtype":4,"shape":[2],"data_offsets":[0,8])") +
              "}"),
       "field 'dtype'"},
      {"UnknownDtype",
       header("{" +
              Tensor("w",
                     R"("dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8])") +
              "}"),
       "unsupported dtype 'F8_E4M3'"},
      {"SummonDtypeSpelling",
       header("{" +
              Tensor("w",
                     R"("dtype":"float32","shape":[2],"data_offsets":[0,8])") +
              "}"),
       "unsupported dtype 'float32'"},
      {"MissingShape",
       header("{" + Tensor("w", R"("dtype":"F32","data_offsets":[0,8])") + "}"),
       "tensor 'w': field 'shape'"},
      {"NegativeDimension",
       header(
           "{" +
           Tensor("w", R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])") +
           "}"),
       "shape dimension -2"},
      {"FractionalDimension",
       header(
           "{" +
           Tensor("w", R"("dtype":"F32","shape":[1.5],"data_offsets":[0,8])") +
           "}"),
       "shape dimension 1.5"},
      {"NumelOverflows",
       header("{" +
              Tensor("w", R"("dtype":"F32","shape":[4611686018427387904,4],)"
                          R"("data_offsets":[0,8])") +
              "}"),
       "too large"},
      {"ByteSizeOverflows",
       header("{" +
              Tensor("w", R"("dtype":"F64","shape":[2305843009213693952,2],)"
                          R"("data_offsets":[0,8])") +
              "}"),
       "too large"},
      {"MissingOffsets",
       header("{" + Tensor("w", R"("dtype":"F32","shape":[2])") + "}"),
       "field 'data_offsets'"},
      {"ThreeOffsets",
       header("{" + Tensor("w", f32x2 + R"("data_offsets":[0,8,8])") + "}"),
       "field 'data_offsets'"},
      {"NegativeOffset",
       header("{" + Tensor("w", f32x2 + R"("data_offsets":[-8,0])") + "}"),
       "are not integers"},
      {"EndBeforeBegin",
       header("{" + Tensor("w", f32x2 + R"("data_offsets":[8,0])") + "}"),
       "not a range inside"},
      {"EndBeyondData",
       header("{" + Tensor("w", f32x2 + R"("data_offsets":[12,20])") + "}"),
       "not a range inside the 16 data bytes"},
      {"SizeMismatch",
       header("{" + Tensor("w", f32x2 + R"("data_offsets":[0,12])") + "}"),
       "hold 12 bytes but F32 [2] needs 8"},
      {"Overlap",
       header("{" + Tensor("a", f32x2 + R"("data_offsets":[0,8])") + "," +
              Tensor("b", f32x2 + R"("data_offsets":[4,12])") + "}"),
       "tensors 'a' and 'b' overlap"},
      {"DuplicateName",
       header("{" + Tensor("a", f32x2 + R"("data_offsets":[0,8])") + "," +
              Tensor("a", f32x2 + R"("data_offsets":[8,16])") + "}"),
       "duplicate key 'a'"},
      {"DuplicateField",
       header("{" +
              Tensor("a", f32x2 + R"("data_offsets":[0,8],"dtype":"F16")") +
              "}"),
       "duplicate key 'dtype'"},
      {"MetadataNotAnObject", header(R"({"__metadata__":"pt"})"),
       "__metadata__: expected an object"},
      {"MetadataValueNotAString", header(R"({"__metadata__":{"step":7}})"),
       "value of 'step'"},
  };
}

class MalformedFileTest : public testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedFileTest, IsInvalidArgument) {
  const std::string path = MakeTempDir() + "/bad.safetensors";
  WriteFile(path, GetParam().file);
  absl::StatusOr<SafetensorsHeader> header =
      ReadSafetensorsHeaderFromFile(path);
  ASSERT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument)
      << header.status();
  EXPECT_THAT(header.status().message(), HasSubstr(GetParam().message));
  EXPECT_THAT(header.status().message(), HasSubstr(path));
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedFileTest,
                         testing::ValuesIn(MalformedCases()),
                         [](const testing::TestParamInfo<MalformedCase>& info) {
                           return info.param.name;
                         });

TEST(ReadSafetensorsHeaderTest, RefusesAHeaderOverTheLimitBeforeReadingIt) {
  const std::string path = MakeTempDir() + "/huge.safetensors";
  WriteFile(path, LengthPrefix(kMaxSafetensorsHeaderBytes + 1));
  // Sparse, so the length fits the file and only the limit refuses it.
  ASSERT_EQ(truncate(path.c_str(), kMaxSafetensorsHeaderBytes + 64), 0);
  absl::StatusOr<SafetensorsHeader> header =
      ReadSafetensorsHeaderFromFile(path);
  ASSERT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(header.status().message(), HasSubstr("longer than the limit"));
}

TEST(ParseSafetensorsHeaderTest, RefusesAHeaderLongerThanTheFile) {
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader("{}", /*file_size=*/9);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PreadFullyTest, ReportsATruncatedFile) {
  const std::string path = MakeTempDir() + "/short";
  WriteFile(path, "abcd");
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buffer[8];
  EXPECT_TRUE(PreadFully(fd, buffer, 3, 1).ok());
  EXPECT_EQ(std::string(buffer, 3), "bcd");
  absl::Status status = PreadFully(fd, buffer, 8, 0);
  close(fd);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
}

TEST(SafetensorsIndexTest, SerializesAndParsesBack) {
  SafetensorsIndex index;
  index.weight_map = {{"z", "model-00001-of-00002.safetensors"},
                      {"a", "model-00002-of-00002.safetensors"}};
  index.metadata = {{"format", "pt"}};
  absl::StatusOr<SafetensorsIndex> parsed =
      ParseSafetensorsIndex(SerializeSafetensorsIndex(index, 1234));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->weight_map, index.weight_map);
  EXPECT_THAT(parsed->metadata,
              ElementsAre(Pair("format", "pt"), Pair("total_size", "1234")));
}

TEST(SafetensorsIndexTest, RefusesMalformedIndexes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {R"({"metadata":{}})", "weight_map"},
      {R"({"weight_map":[]})", "weight_map"},
      {R"({"metadata":3,"weight_map":{}})", "metadata"},
      {R"({"weight_map":{"w":7}})", "weight_map['w']"},
      {R"({"weight_map":{"w":""}})", "weight_map['w']"},
      {R"({"weight_map":{"w":".."}})", "not a file name beside"},
      {R"({"weight_map":{"w":"../x.safetensors"}})", "not a file name beside"},
      {R"({"weight_map":{"w":"a.safetensors","w":"b.safetensors"}})",
       "duplicate key 'w'"},
  };
  for (const auto& [json, message] : cases) {
    absl::StatusOr<SafetensorsIndex> index = ParseSafetensorsIndex(json);
    EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument)
        << json;
    EXPECT_THAT(index.status().message(), HasSubstr(message)) << json;
  }
}

// Two files; in each the header lists tensors in another order than their
// data, so checkpoint order (file name, then offset) is observable.
class OpenSafetensorsCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    WriteFile(dir_ + "/part-b.safetensors",
              FileWithHeader(R"({"d":{"dtype":"F32","shape":[1],)"
                             R"("data_offsets":[4,8]},)"
                             R"("c":{"dtype":"F32","shape":[1],)"
                             R"("data_offsets":[0,4]}})",
                             8));
    WriteFile(dir_ + "/part-a.safetensors",
              FileWithHeader(R"({"b":{"dtype":"F16","shape":[2],)"
                             R"("data_offsets":[4,8]},)"
                             R"("a":{"dtype":"F16","shape":[2],)"
                             R"("data_offsets":[0,4]},)"
                             R"("unindexed":{"dtype":"F16","shape":[0],)"
                             R"("data_offsets":[8,8]}})",
                             8));
  }

  std::vector<std::string> NamesInOrder(
      const SafetensorsCheckpoint& checkpoint) {
    std::vector<std::string> names;
    for (const SafetensorsTensorRef& tensor : checkpoint.tensors) {
      names.push_back(checkpoint.Entry(tensor).name);
      EXPECT_EQ(checkpoint.by_name.at(names.back()),
                static_cast<int>(names.size()) - 1);
    }
    return names;
  }

  std::string dir_;
};

TEST_F(OpenSafetensorsCheckpointTest, OpensAnIndexedDirectoryInFileOrder) {
  WriteFile(dir_ + "/model.safetensors.index.json",
            R"({"metadata":{"total_size":24},"weight_map":{)"
            R"("d":"part-b.safetensors","a":"part-a.safetensors",)"
            R"("c":"part-b.safetensors","b":"part-a.safetensors"}})");
  for (const std::string& path :
       {dir_, dir_ + "/model.safetensors.index.json"}) {
    absl::StatusOr<SafetensorsCheckpoint> checkpoint =
        OpenSafetensorsCheckpoint(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    ASSERT_EQ(checkpoint->files.size(), 2u);
    EXPECT_EQ(checkpoint->files[0].path, dir_ + "/part-a.safetensors");
    EXPECT_THAT(NamesInOrder(*checkpoint), ElementsAre("a", "b", "c", "d"));
  }
}

TEST_F(OpenSafetensorsCheckpointTest, OpensOneFileInOffsetOrder) {
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(dir_ + "/part-a.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT(NamesInOrder(*checkpoint), ElementsAre("a", "b", "unindexed"));
}

TEST_F(OpenSafetensorsCheckpointTest, OpensADirectoryWithOneFileAndNoIndex) {
  ASSERT_EQ(unlink((dir_ + "/part-a.safetensors").c_str()), 0);
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(dir_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT(NamesInOrder(*checkpoint), ElementsAre("c", "d"));
}

TEST_F(OpenSafetensorsCheckpointTest,
       RefusesADirectoryOfSeveralFilesAndNoIndex) {
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(dir_);
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("2 .safetensors"));
}

TEST_F(OpenSafetensorsCheckpointTest, RefusesAnIndexNamingAnAbsentTensor) {
  WriteFile(dir_ + "/model.safetensors.index.json",
            R"({"weight_map":{"c":"part-a.safetensors"}})");
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(dir_);
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("maps tensor 'c' to part-a.safetensors"));
}

TEST_F(OpenSafetensorsCheckpointTest, RefusesAMalformedFileOfTheIndex) {
  WriteFile(dir_ + "/part-b.safetensors", LengthPrefix(1) + "{");
  WriteFile(dir_ + "/model.safetensors.index.json",
            R"({"weight_map":{"a":"part-a.safetensors",)"
            R"("c":"part-b.safetensors"}})");
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(dir_);
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("part-b.safetensors"));
}

TEST_F(OpenSafetensorsCheckpointTest, MissingPathIsNotFound) {
  EXPECT_EQ(
      OpenSafetensorsCheckpoint(dir_ + "/nope.safetensors").status().code(),
      absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace summon::server
