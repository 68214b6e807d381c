#include "client/files/npz.h"

#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::client {
namespace {

constexpr uint64_t kZipLimit = std::numeric_limits<uint32_t>::max();
constexpr size_t kMaxMembers = std::numeric_limits<uint16_t>::max();
// Bit 3: the CRC and sizes follow the data in a data descriptor.
constexpr uint16_t kFlagDataDescriptor = 0x0008;
// "Version needed to extract" 2.0: data descriptors.
constexpr uint16_t kVersion = 20;
// DOS date 1980-01-01, time 00:00: the zip epoch (no clock in the archive,
// so two exports of the same session are the same bytes).
constexpr uint16_t kDosDate = (1 << 5) | 1;

const std::array<uint32_t, 256>& CrcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void Put16(std::string& out, uint64_t value) {
  out.push_back(static_cast<char>(value & 0xFF));
  out.push_back(static_cast<char>((value >> 8) & 0xFF));
}
void Put32(std::string& out, uint64_t value) {
  Put16(out, value & 0xFFFF);
  Put16(out, (value >> 16) & 0xFFFF);
}

absl::Status TooLarge(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "an .npz holds at most 4 GiB - 1 bytes and 65535 arrays (zip without "
      "zip64), and ",
      what, " does not fit: export as safetensors instead"));
}

}  // namespace

uint32_t Crc32(uint32_t crc, absl::string_view bytes) {
  const std::array<uint32_t, 256>& table = CrcTable();
  crc = ~crc;
  for (const char byte : bytes) {
    crc = table[(crc ^ static_cast<uint8_t>(byte)) & 0xFF] ^ (crc >> 8);
  }
  return ~crc;
}

absl::Status NpzWriter::Emit(absl::string_view bytes) {
  if (written_ + bytes.size() > kZipLimit) return TooLarge("this export");
  written_ += bytes.size();
  return sink_(bytes);
}

absl::Status NpzWriter::Begin(absl::string_view name) {
  if (absl::Status ended = EndMember(); !ended.ok()) return ended;
  if (members_.size() == kMaxMembers) return TooLarge("this export");
  Member member;
  member.name = absl::StrCat(name, ".npy");
  member.offset = written_;
  std::string header;
  Put32(header, 0x04034b50);
  Put16(header, kVersion);
  Put16(header, kFlagDataDescriptor);
  Put16(header, 0);  // Stored.
  Put16(header, 0);  // Time.
  Put16(header, kDosDate);
  Put32(header, 0);  // CRC, compressed and uncompressed sizes: in the
  Put32(header, 0);  // data descriptor.
  Put32(header, 0);
  Put16(header, member.name.size());
  Put16(header, 0);  // No extra field.
  header += member.name;
  members_.push_back(std::move(member));
  open_ = true;
  return Emit(header);
}

absl::Status NpzWriter::Write(absl::string_view bytes) {
  Member& member = members_.back();
  if (member.size + bytes.size() > kZipLimit) {
    return TooLarge(absl::StrCat("the array ", member.name));
  }
  member.crc = Crc32(member.crc, bytes);
  member.size += bytes.size();
  return Emit(bytes);
}

absl::Status NpzWriter::EndMember() {
  if (!open_) return absl::OkStatus();
  open_ = false;
  const Member& member = members_.back();
  std::string descriptor;
  Put32(descriptor, 0x08074b50);
  Put32(descriptor, member.crc);
  Put32(descriptor, member.size);
  Put32(descriptor, member.size);
  return Emit(descriptor);
}

absl::Status NpzWriter::Finish() {
  if (absl::Status ended = EndMember(); !ended.ok()) return ended;
  const uint64_t directory_offset = written_;
  std::string directory;
  for (const Member& member : members_) {
    Put32(directory, 0x02014b50);
    Put16(directory, (3 << 8) | kVersion);  // Made by: Unix, 2.0.
    Put16(directory, kVersion);
    Put16(directory, kFlagDataDescriptor);
    Put16(directory, 0);
    Put16(directory, 0);
    Put16(directory, kDosDate);
    Put32(directory, member.crc);
    Put32(directory, member.size);
    Put32(directory, member.size);
    Put16(directory, member.name.size());
    Put16(directory, 0);  // Extra field.
    Put16(directory, 0);  // Comment.
    Put16(directory, 0);  // Disk.
    Put16(directory, 0);  // Internal attributes.
    Put32(directory, uint64_t{0100644} << 16);  // A regular file, rw-r--r--.
    Put32(directory, member.offset);
    directory += member.name;
  }
  std::string end;
  Put32(end, 0x06054b50);
  Put16(end, 0);
  Put16(end, 0);
  Put16(end, members_.size());
  Put16(end, members_.size());
  Put32(end, directory.size());
  Put32(end, directory_offset);
  Put16(end, 0);  // Comment.
  if (absl::Status status = Emit(directory); !status.ok()) return status;
  return Emit(end);
}

}  // namespace summon::client
