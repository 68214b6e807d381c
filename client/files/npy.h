#ifndef SUMMON_CLIENT_FILES_NPY_H_
#define SUMMON_CLIENT_FILES_NPY_H_

#include <cstdint>
#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace summon::client {

// A little-endian, C-order array as NumPy's .npy format stores it. summon's
// floating dtypes map to .npy type descriptors as float32 '<f4', float64
// '<f8', float16 '<f2' and bfloat16 '<u2': NumPy has no bfloat16, so its raw
// uint16 bit pattern is stored and '<u2' reads back as bfloat16.
struct NpyArray {
  core::DType dtype = core::DType::kFloat32;
  core::Shape shape;
  // numel(shape) * ElementSize(dtype) bytes, little-endian, row-major.
  std::string data;
};

// The .npy format version 1.0 bytes of `array`: magic, version, header length,
// the header dict padded with spaces and ended by '\n' so that the data starts
// at a multiple of 64 bytes, then the data. INVALID_ARGUMENT for a dtype
// without a descriptor above or a data size that does not match the shape.
absl::StatusOr<std::string> EncodeNpy(const NpyArray& array);
// Only the part before the data, for writers that stream the data after it.
absl::StatusOr<std::string> EncodeNpyHeader(core::DType dtype,
                                            const core::Shape& shape);

// Parses .npy bytes of format version 1.0, 2.0 or 3.0 holding one of the four
// descriptors above. INVALID_ARGUMENT for anything else: bad magic or version,
// a truncated or malformed header dict, an unknown or big-endian descriptor,
// fortran_order True, a negative or overflowing shape, or a data size other
// than the shape's.
absl::StatusOr<NpyArray> DecodeNpy(absl::string_view bytes);

// What precedes a .npy file's data, for readers that stream the data.
struct NpyHeader {
  core::DType dtype = core::DType::kFloat32;
  core::Shape shape;
  int64_t data_offset = 0;  // Where the data starts.
  int64_t data_bytes = 0;   // numel(shape) * ElementSize(dtype).
};
// Parses the header at the start of `bytes` (which must hold all of it; the
// data after it is not looked at). The same refusals as DecodeNpy.
absl::StatusOr<NpyHeader> DecodeNpyHeader(absl::string_view bytes);
// Reads exactly the header from `in`, leaving it at the first data byte.
absl::StatusOr<NpyHeader> ReadNpyHeader(std::istream& in);

// EncodeNpy/DecodeNpy through a file; file errors carry the path. Writing
// goes through OutputFile: devices, FIFOs and sockets are written in place,
// a symlink's target is replaced, a regular file renamed into place.
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// The whole contents of a file, or the error naming it.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_FILES_NPY_H_
