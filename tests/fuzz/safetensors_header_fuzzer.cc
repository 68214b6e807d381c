// Fuzzes the safetensors header parser (the JSON a user's checkpoint file
// starts with) and the multi-file index parser.
//
// Input: 8 bytes, little endian, the number of data bytes after the header
// (top two bits dropped, so 8 + H + data never overflows int64), then the
// header JSON; the same JSON is also parsed as a model.safetensors.index.json.
// Beyond the sanitizers, every accepted header and index must survive a
// serialize/parse round trip unchanged.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/checkpoint/safetensors.h"

namespace {

using summon::server::SafetensorsEntry;
using summon::server::SafetensorsHeader;
using summon::server::SafetensorsIndex;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "round trip broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

bool SameEntry(const SafetensorsEntry& a, const SafetensorsEntry& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
         a.numel == b.numel && a.begin == b.begin && a.end == b.end;
}

void CheckHeaderRoundTrip(const SafetensorsHeader& header, int64_t data_bytes) {
  const std::string file_start =
      summon::server::SerializeSafetensorsHeader(header);
  if (file_start.size() < 8 || file_start.size() % 8 != 0) {
    Fail("header", "serialized size " + std::to_string(file_start.size()) +
                       " is not a positive multiple of 8");
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) {
    length = (length << 8) | static_cast<uint8_t>(file_start[i]);
  }
  const absl::string_view json = absl::string_view(file_start).substr(8);
  if (length != json.size()) Fail("header", "length prefix != JSON size");
  const absl::StatusOr<SafetensorsHeader> again =
      summon::server::ParseSafetensorsHeader(
          json, static_cast<int64_t>(file_start.size()) + data_bytes);
  if (!again.ok()) Fail("header", again.status().ToString());
  if (again->data_start != static_cast<int64_t>(file_start.size())) {
    Fail("header", "data_start is not the serialized size");
  }
  if (again->metadata != header.metadata) Fail("header", "metadata differs");
  if (again->entries.size() != header.entries.size()) {
    Fail("header", "entry count differs");
  }
  for (size_t i = 0; i < header.entries.size(); ++i) {
    if (!SameEntry(again->entries[i], header.entries[i])) {
      Fail("header", "entry '" + header.entries[i].name + "' differs");
    }
    if (again->Find(header.entries[i].name) == nullptr) {
      Fail("header", "Find misses '" + header.entries[i].name + "'");
    }
  }
}

void CheckIndexRoundTrip(const SafetensorsIndex& index) {
  constexpr int64_t kTotalBytes = 12345;
  const absl::StatusOr<SafetensorsIndex> again =
      summon::server::ParseSafetensorsIndex(
          summon::server::SerializeSafetensorsIndex(index, kTotalBytes));
  if (!again.ok()) Fail("index", again.status().ToString());
  if (again->weight_map != index.weight_map) {
    Fail("index", "weight_map differs");
  }
  // "total_size" is rewritten from the argument; every other key survives.
  SafetensorsIndex expected = index;
  expected.metadata["total_size"] = std::to_string(kTotalBytes);
  if (again->metadata != expected.metadata) Fail("index", "metadata differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t data_bytes = 0;
  std::memcpy(&data_bytes, data, 8);  // x86-64: little endian.
  data_bytes &= (uint64_t{1} << 62) - 1;
  const absl::string_view json(reinterpret_cast<const char*>(data) + 8,
                               size - 8);
  const int64_t file_size =
      8 + static_cast<int64_t>(json.size()) + static_cast<int64_t>(data_bytes);

  const absl::StatusOr<SafetensorsHeader> header =
      summon::server::ParseSafetensorsHeader(json, file_size);
  if (header.ok()) {
    CheckHeaderRoundTrip(*header, static_cast<int64_t>(data_bytes));
  }
  const absl::StatusOr<SafetensorsIndex> index =
      summon::server::ParseSafetensorsIndex(json);
  if (index.ok()) CheckIndexRoundTrip(*index);
  return 0;
}
