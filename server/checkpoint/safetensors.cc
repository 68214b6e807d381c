// The safetensors file format itself (see safetensors.h): parsing and
// validating a header, reading one from a file, serializing one, and the
// positional I/O every reader and writer uses. Apart from
// safetensors_index.cc, which opens checkpoints of one or several files and
// reads and writes the index; the two share safetensors_internal.h.
#include "server/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/safetensors_internal.h"

namespace summon::server {

absl::Status Labelled(absl::string_view label, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat(label, ": ", status.message()));
}

namespace safetensors_internal {

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::StatusOr<Json> ParseJsonRejectingDuplicates(absl::string_view text,
                                                  absl::string_view what) {
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  Json::parser_callback_t callback = [&](int, Json::parse_event_t event,
                                         Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!duplicate.has_value() && !open_objects.empty() &&
            !open_objects.back()
                 .insert(parsed.get_ref<const std::string&>())
                 .second) {
          duplicate = parsed.get_ref<const std::string&>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json json = Json::parse(text.begin(), text.end(), callback,
                          /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return Invalid(what, "not valid JSON (or not valid UTF-8)");
  }
  if (duplicate.has_value()) {
    return Invalid(what, absl::StrCat("duplicate key '", *duplicate, "'"));
  }
  if (!json.is_object()) {
    return Invalid(what, absl::StrCat("JSON type ", json.type_name(),
                                      ", expected an object"));
  }
  return json;
}

const Json* FindField(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

absl::StatusOr<ScopedFd> OpenForReading(const std::string& path,
                                        const FileAdmission& admit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  ScopedFd opened(fd);
  if (admit != nullptr) {
    if (absl::Status admitted = admit(opened.get(), path); !admitted.ok()) {
      return admitted;
    }
  }
  return opened;
}

}  // namespace safetensors_internal

namespace {

using safetensors_internal::FindField;
using safetensors_internal::Invalid;
using safetensors_internal::Json;
using safetensors_internal::OpenForReading;
using safetensors_internal::ParseJsonRejectingDuplicates;

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr int kLengthPrefixBytes = 8;

// A JSON integer >= 0 that fits int64 (nlohmann stores non-negative literals
// as unsigned, negative ones as signed).
std::optional<int64_t> NonNegativeInt(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(number);
  }
  return std::nullopt;
}

absl::StatusOr<core::DType> ParseSafetensorsDType(const Json* value,
                                                  absl::string_view where) {
  if (value == nullptr || !value->is_string()) {
    return Invalid(where, "field 'dtype' is missing or not a string");
  }
  const std::string& name = value->get_ref<const std::string&>();
  // ParseDType also takes summon's spellings ("float32"); a safetensors file
  // must use its own.
  absl::StatusOr<core::DType> dtype = core::ParseDType(name);
  if (!dtype.ok() || core::SafetensorsDTypeName(*dtype) != name) {
    return Invalid(where,
                   absl::StrCat("unsupported dtype '", name,
                                "' (supported: F32, F64, F16, BF16, I8, U8, "
                                "I16, I32, I64, BOOL)"));
  }
  return *dtype;
}

absl::StatusOr<core::Shape> ParseShape(const Json* value,
                                       absl::string_view where) {
  if (value == nullptr || !value->is_array()) {
    return Invalid(where, "field 'shape' is missing or not an array");
  }
  core::Shape shape;
  for (const Json& dim : *value) {
    std::optional<int64_t> size = NonNegativeInt(dim);
    if (!size.has_value()) {
      return Invalid(where, absl::StrCat("shape dimension ", dim.dump(),
                                         " is not an integer in [0, 2^63)"));
    }
    shape.push_back(*size);
  }
  return shape;
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name,
                                            const Json& value,
                                            int64_t data_bytes) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!value.is_object()) {
    return Invalid(where, absl::StrCat("JSON type ", value.type_name(),
                                       ", expected an object"));
  }
  SafetensorsEntry entry;
  entry.name = name;
  absl::StatusOr<core::DType> dtype =
      ParseSafetensorsDType(FindField(value, "dtype"), where);
  if (!dtype.ok()) return dtype.status();
  entry.dtype = *dtype;
  absl::StatusOr<core::Shape> shape =
      ParseShape(FindField(value, "shape"), where);
  if (!shape.ok()) return shape.status();
  entry.shape = *std::move(shape);
  absl::StatusOr<int64_t> numel = core::NumElements(entry.shape);
  const int64_t element_size =
      static_cast<int64_t>(core::ElementSize(entry.dtype));
  if (!numel.ok() ||
      *numel > std::numeric_limits<int64_t>::max() / element_size) {
    return Invalid(where,
                   absl::StrCat("shape ", core::ShapeToString(entry.shape),
                                " is too large to address"));
  }
  entry.numel = *numel;

  const Json* offsets = FindField(value, "data_offsets");
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2) {
    return Invalid(where,
                   "field 'data_offsets' is missing or not [begin, end]");
  }
  std::optional<int64_t> begin = NonNegativeInt((*offsets)[0]);
  std::optional<int64_t> end = NonNegativeInt((*offsets)[1]);
  if (!begin.has_value() || !end.has_value()) {
    return Invalid(where, absl::StrCat("data_offsets ", offsets->dump(),
                                       " are not integers in [0, 2^63)"));
  }
  if (*end < *begin || *end > data_bytes) {
    return Invalid(where, absl::StrCat("data_offsets [", *begin, ", ", *end,
                                       "] are not a range inside the ",
                                       data_bytes, " data bytes of the file"));
  }
  const int64_t bytes = entry.numel * element_size;
  if (*end - *begin != bytes) {
    return Invalid(where, absl::StrCat("data_offsets [", *begin, ", ", *end,
                                       "] hold ", *end - *begin, " bytes but ",
                                       core::SafetensorsDTypeName(entry.dtype),
                                       " ", core::ShapeToString(entry.shape),
                                       " needs ", bytes));
  }
  entry.begin = *begin;
  entry.end = *end;
  return entry;
}

absl::Status CheckNoOverlap(const std::vector<SafetensorsEntry>& entries) {
  std::vector<const SafetensorsEntry*> by_begin;
  for (const SafetensorsEntry& entry : entries) {
    if (entry.end > entry.begin)
      by_begin.push_back(&entry);  // Empty: no bytes.
  }
  std::sort(by_begin.begin(), by_begin.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
              return a->begin < b->begin;
            });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    if (by_begin[i]->begin < by_begin[i - 1]->end) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors '", by_begin[i - 1]->name, "' and '",
                       by_begin[i]->name, "' overlap in the file's data"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsHeader::Find(absl::string_view name) const {
  for (const SafetensorsEntry& entry : entries) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view header_json, int64_t file_size) {
  SafetensorsHeader header;
  header.data_start =
      kLengthPrefixBytes + static_cast<int64_t>(header_json.size());
  if (header.data_start > file_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("header of ", header_json.size(),
                     " bytes does not fit in a file of ", file_size, " bytes"));
  }
  absl::StatusOr<Json> json =
      ParseJsonRejectingDuplicates(header_json, "safetensors header");
  if (!json.ok()) return json.status();
  for (const auto& [key, value] : json->items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        return Invalid(kMetadataKey, "expected an object of strings");
      }
      for (const auto& [name, text] : value.items()) {
        if (!text.is_string()) {
          return Invalid(kMetadataKey,
                         absl::StrCat("value of '", name, "' has JSON type ",
                                      text.type_name(), ", expected a string"));
        }
        header.metadata[name] = text.get<std::string>();
      }
      continue;
    }
    absl::StatusOr<SafetensorsEntry> entry =
        ParseEntry(key, value, file_size - header.data_start);
    if (!entry.ok()) return entry.status();
    header.entries.push_back(*std::move(entry));
  }
  if (absl::Status overlap = CheckNoOverlap(header.entries); !overlap.ok()) {
    return overlap;
  }
  return header;
}

absl::Status PreadFully(int fd, void* data, int64_t bytes, int64_t offset) {
  auto* cursor = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, cursor, static_cast<size_t>(bytes), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::ErrnoToStatus(errno, "pread");
    if (got == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("file ends at byte ", offset, " with ", bytes,
                       " bytes still to read: truncated file"));
    }
    cursor += got;
    bytes -= got;
    offset += got;
  }
  return absl::OkStatus();
}

absl::Status PwriteFully(int fd, const void* data, int64_t bytes,
                         int64_t offset) {
  const auto* cursor = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t put =
        ::pwrite(fd, cursor, static_cast<size_t>(bytes), offset);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return absl::ErrnoToStatus(errno, "pwrite");
    cursor += put;
    bytes -= put;
    offset += put;
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(
    int fd, absl::string_view name) {
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    return Labelled(name, absl::ErrnoToStatus(errno, "fstat"));
  }
  const int64_t file_size = info.st_size;
  if (file_size < kLengthPrefixBytes) {
    return Labelled(
        name,
        absl::InvalidArgumentError(absl::StrCat(
            "a safetensors file has at least 8 bytes, this one ", file_size)));
  }
  uint8_t prefix[kLengthPrefixBytes];
  if (absl::Status read = PreadFully(fd, prefix, kLengthPrefixBytes, 0);
      !read.ok()) {
    return Labelled(name, read);
  }
  uint64_t header_bytes = 0;
  for (int i = kLengthPrefixBytes - 1; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | prefix[i];
  }
  if (header_bytes > static_cast<uint64_t>(file_size - kLengthPrefixBytes)) {
    // The length is the file's first 8 bytes: never echoed, so a probe of
    // an arbitrary file learns nothing of its contents (R20).
    return Labelled(name, absl::InvalidArgumentError(absl::StrCat(
                              "not a safetensors file: the header length at "
                              "its start exceeds the file of ",
                              file_size, " bytes")));
  }
  if (header_bytes > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return Labelled(name, absl::InvalidArgumentError(absl::StrCat(
                              "the header is longer than the limit of ",
                              kMaxSafetensorsHeaderBytes, " bytes")));
  }
  std::string header_json(header_bytes, '\0');
  if (absl::Status read =
          PreadFully(fd, header_json.data(), static_cast<int64_t>(header_bytes),
                     kLengthPrefixBytes);
      !read.ok()) {
    return Labelled(name, read);
  }
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(header_json, file_size);
  if (!header.ok()) return Labelled(name, header.status());
  return header;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeaderFromFile(
    const std::string& path) {
  absl::StatusOr<ScopedFd> fd = OpenForReading(path);
  if (!fd.ok()) return fd.status();
  return ReadSafetensorsHeader(fd->get(), path);
}

std::string SerializeSafetensorsHeader(const SafetensorsHeader& header) {
  Json json = Json::object();
  if (!header.metadata.empty()) {
    Json& metadata = json[std::string(kMetadataKey)];
    metadata = Json::object();
    for (const auto& [key, value] : header.metadata) metadata[key] = value;
  }
  for (const SafetensorsEntry& entry : header.entries) {
    json[entry.name] =
        Json{{"dtype", std::string(core::SafetensorsDTypeName(entry.dtype))},
             {"shape", entry.shape},
             {"data_offsets", Json::array({entry.begin, entry.end})}};
  }
  // `replace` instead of throwing on invalid UTF-8: names come from layouts
  // that were parsed as JSON, so they are valid, and a throw is never right.
  std::string text = json.dump(-1, ' ', /*ensure_ascii=*/false,
                               Json::error_handler_t::replace);
  const size_t unaligned = (kLengthPrefixBytes + text.size()) % 8;
  if (unaligned != 0) text.append(8 - unaligned, ' ');
  std::string out(kLengthPrefixBytes, '\0');
  const uint64_t length = text.size();
  for (int i = 0; i < kLengthPrefixBytes; ++i) {
    out[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  }
  out += text;
  return out;
}

}  // namespace summon::server
