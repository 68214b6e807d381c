#include "client/files/npy.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/files/output_file.h"

namespace summon::client {
namespace {

// "\x93NUMPY", then major and minor version bytes.
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// The data of a version 1.0 file starts at a multiple of this.
constexpr size_t kAlignment = 64;

struct DescrEntry {
  core::DType dtype;
  absl::string_view descr;
};
constexpr DescrEntry kDescrs[] = {
    {core::DType::kFloat32, "<f4"},
    {core::DType::kFloat64, "<f8"},
    {core::DType::kFloat16, "<f2"},
    {core::DType::kBFloat16, "<u2"},
};

absl::StatusOr<absl::string_view> DescrOf(core::DType dtype) {
  for (const DescrEntry& entry : kDescrs) {
    if (entry.dtype == dtype) return entry.descr;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("npy: no .npy descriptor for dtype ", core::DTypeName(dtype),
                   " (float32, float64, float16 and bfloat16 only)"));
}

absl::StatusOr<core::DType> DTypeOfDescr(absl::string_view descr) {
  for (const DescrEntry& entry : kDescrs) {
    if (entry.descr == descr) return entry.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("npy: unsupported descr '", descr,
                   "' (expected little-endian '<f4', '<f8', '<f2' or '<u2')"));
}

// Python's repr of a tuple of ints: "()", "(3,)", "(2, 3)".
std::string ShapeTuple(const core::Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::Status HeaderError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("npy: bad header: ", what));
}

// The header is a Python dict literal with exactly the keys 'descr',
// 'fortran_order' and 'shape'. This reads that subset of Python literal
// syntax and nothing more.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : rest_(text) {}

  absl::Status Parse(std::string& descr, bool& fortran_order,
                     core::Shape& shape) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!Consume('{')) return HeaderError("expected '{'");
    while (!Consume('}')) {
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      if (!Consume(':')) return HeaderError("expected ':' after a key");
      absl::Status value_status;
      if (*key == "descr" && !seen_descr) {
        seen_descr = true;
        absl::StatusOr<std::string> value = ParseString();
        value_status = value.status();
        if (value.ok()) descr = std::move(*value);
      } else if (*key == "fortran_order" && !seen_order) {
        seen_order = true;
        value_status = ParseBool(fortran_order);
      } else if (*key == "shape" && !seen_shape) {
        seen_shape = true;
        value_status = ParseShape(shape);
      } else {
        return HeaderError(
            absl::StrCat("unexpected or repeated key '", *key, "'"));
      }
      if (!value_status.ok()) return value_status;
      if (!Consume(',')) {
        if (!Consume('}')) return HeaderError("expected ',' or '}'");
        break;
      }
    }
    SkipSpace();
    if (!rest_.empty()) return HeaderError("text after the dict");
    if (!seen_descr || !seen_order || !seen_shape) {
      return HeaderError("'descr', 'fortran_order' and 'shape' are required");
    }
    return absl::OkStatus();
  }

 private:
  void SkipSpace() {
    while (!rest_.empty() &&
           (rest_[0] == ' ' || rest_[0] == '\n' || rest_[0] == '\t')) {
      rest_.remove_prefix(1);
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (rest_.empty() || rest_[0] != c) return false;
    rest_.remove_prefix(1);
    return true;
  }

  bool ConsumeWord(absl::string_view word) {
    SkipSpace();
    if (rest_.substr(0, word.size()) != word) return false;
    rest_.remove_prefix(word.size());
    return true;
  }

  // A quoted string without escapes (descriptors and keys never have any).
  absl::StatusOr<std::string> ParseString() {
    SkipSpace();
    if (rest_.empty() || (rest_[0] != '\'' && rest_[0] != '"')) {
      return HeaderError("expected a quoted string");
    }
    const char quote = rest_[0];
    const size_t end = rest_.find(quote, 1);
    if (end == absl::string_view::npos) return HeaderError("unclosed string");
    std::string value(rest_.substr(1, end - 1));
    rest_.remove_prefix(end + 1);
    return value;
  }

  absl::Status ParseBool(bool& value) {
    if (ConsumeWord("True")) {
      value = true;
    } else if (ConsumeWord("False")) {
      value = false;
    } else {
      return HeaderError("'fortran_order' must be True or False");
    }
    return absl::OkStatus();
  }

  absl::Status ParseShape(core::Shape& shape) {
    shape.clear();
    if (!Consume('(')) return HeaderError("'shape' must be a tuple");
    while (!Consume(')')) {
      SkipSpace();
      size_t digits = 0;
      while (digits < rest_.size() && rest_[digits] >= '0' &&
             rest_[digits] <= '9') {
        ++digits;
      }
      int64_t dim = 0;
      if (digits == 0 || !absl::SimpleAtoi(rest_.substr(0, digits), &dim)) {
        return HeaderError("'shape' must hold non-negative integers");
      }
      shape.push_back(dim);
      rest_.remove_prefix(digits);
      if (!Consume(',')) {
        if (!Consume(')')) return HeaderError("expected ',' or ')' in shape");
        break;
      }
    }
    return absl::OkStatus();
  }

  absl::string_view rest_;
};

// Little-endian unsigned integer of `size` bytes at `p`.
uint32_t ReadLittleEndian(const char* p, size_t size) {
  uint32_t value = 0;
  for (size_t i = size; i > 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(p[i - 1]);
  }
  return value;
}

}  // namespace

absl::StatusOr<std::string> EncodeNpy(const NpyArray& array) {
  absl::StatusOr<int64_t> numel = core::NumElements(array.shape);
  if (!numel.ok()) return numel.status();
  const size_t expected_bytes =
      static_cast<size_t>(*numel) * core::ElementSize(array.dtype);
  if (array.data.size() != expected_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: shape ", core::ShapeToString(array.shape), " of ",
                     core::DTypeName(array.dtype), " needs ", expected_bytes,
                     " bytes, got ", array.data.size()));
  }
  absl::StatusOr<std::string> out = EncodeNpyHeader(array.dtype, array.shape);
  if (!out.ok()) return out;
  *out += array.data;
  return out;
}

absl::StatusOr<std::string> EncodeNpyHeader(core::DType dtype,
                                            const core::Shape& shape) {
  absl::StatusOr<absl::string_view> descr = DescrOf(dtype);
  if (!descr.ok()) return descr.status();
  std::string header = absl::StrCat(
      "{'descr': '", *descr,
      "', 'fortran_order': False, 'shape': ", ShapeTuple(shape), ", }");
  // Magic, 2 version bytes, 2 length bytes, the dict, spaces, '\n'.
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  const size_t padded = (unpadded + kAlignment - 1) / kAlignment * kAlignment;
  header.append(padded - unpadded, ' ');
  header.push_back('\n');
  if (header.size() > 0xFFFF) {
    return absl::InvalidArgumentError(
        "npy: header longer than format 1.0 allows");
  }
  std::string out(kMagic, kMagicSize);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  return out;
}

absl::StatusOr<NpyHeader> DecodeNpyHeader(absl::string_view bytes) {
  if (bytes.size() < kMagicSize + 2 ||
      bytes.substr(0, kMagicSize) != absl::string_view(kMagic, kMagicSize)) {
    return absl::InvalidArgumentError("npy: not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[kMagicSize]);
  // Version 1 stores the header length in 2 bytes, versions 2 and 3 in 4.
  if (major < 1 || major > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: unsupported format version ", major));
  }
  const size_t length_size = major == 1 ? 2 : 4;
  const size_t prefix = kMagicSize + 2 + length_size;
  if (bytes.size() < prefix) {
    return absl::InvalidArgumentError("npy: truncated header length");
  }
  const size_t header_size =
      ReadLittleEndian(bytes.data() + kMagicSize + 2, length_size);
  if (bytes.size() - prefix < header_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: header of ", header_size,
                     " bytes runs past the end of the file"));
  }
  std::string descr;
  bool fortran_order = false;
  NpyHeader header;
  absl::Status parsed = HeaderParser(bytes.substr(prefix, header_size))
                            .Parse(descr, fortran_order, header.shape);
  if (!parsed.ok()) return parsed;
  if (fortran_order) {
    return absl::InvalidArgumentError(
        "npy: fortran_order True is not supported (C order only)");
  }
  absl::StatusOr<core::DType> dtype = DTypeOfDescr(descr);
  if (!dtype.ok()) return dtype.status();
  header.dtype = *dtype;
  absl::StatusOr<int64_t> numel = core::NumElements(header.shape);
  if (!numel.ok()) return numel.status();
  const int64_t element_size =
      static_cast<int64_t>(core::ElementSize(header.dtype));
  // Checked so that the byte size below cannot wrap around.
  if (*numel > INT64_MAX / element_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: shape ", ShapeTuple(header.shape), " needs ", *numel,
                     " elements, more than any file holds"));
  }
  header.data_offset = static_cast<int64_t>(prefix + header_size);
  header.data_bytes = *numel * element_size;
  return header;
}

absl::StatusOr<NpyHeader> ReadNpyHeader(std::istream& in) {
  // Magic and version, then a 2-byte (version 1) or 4-byte header length.
  std::string head(kMagicSize + 2, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.gcount() != static_cast<std::streamsize>(head.size()) ||
      head.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    return absl::InvalidArgumentError("npy: not a .npy file (bad magic)");
  }
  const size_t length_size = head[kMagicSize] == 1 ? 2 : 4;
  std::string length(length_size, '\0');
  in.read(length.data(), static_cast<std::streamsize>(length_size));
  if (in.gcount() != static_cast<std::streamsize>(length_size)) {
    return absl::InvalidArgumentError("npy: truncated header length");
  }
  const size_t header_size = ReadLittleEndian(length.data(), length_size);
  constexpr size_t kMaxHeaderBytes = 1 << 20;
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: a header of ", header_size, " bytes is too long"));
  }
  std::string dict(header_size, '\0');
  in.read(dict.data(), static_cast<std::streamsize>(header_size));
  if (in.gcount() != static_cast<std::streamsize>(header_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: header of ", header_size,
                     " bytes runs past the end of the file"));
  }
  return DecodeNpyHeader(head + length + dict);
}

absl::StatusOr<NpyArray> DecodeNpy(absl::string_view bytes) {
  absl::StatusOr<NpyHeader> header = DecodeNpyHeader(bytes);
  if (!header.ok()) return header.status();
  const absl::string_view data =
      bytes.substr(static_cast<size_t>(header->data_offset));
  if (data.size() != static_cast<uint64_t>(header->data_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: shape ", ShapeTuple(header->shape), " of ",
                     core::DTypeName(header->dtype), " needs ",
                     header->data_bytes /
                         static_cast<int64_t>(core::ElementSize(header->dtype)),
                     " elements, the file holds ", data.size(), " data bytes"));
  }
  return NpyArray{header->dtype, header->shape, std::string(data)};
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) {
    return absl::DataLossError(absl::StrCat("cannot read ", path));
  }
  return contents.str();
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  absl::StatusOr<std::string> bytes = EncodeNpy(array);
  if (!bytes.ok()) return bytes.status();
  return WriteOutputFile(path, *bytes);
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<NpyArray> array = DecodeNpy(*bytes);
  if (!array.ok()) {
    return absl::Status(array.status().code(),
                        absl::StrCat(path, ": ", array.status().message()));
  }
  return array;
}

}  // namespace summon::client
