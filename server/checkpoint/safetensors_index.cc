// Opening a safetensors checkpoint of one or several files (a single file,
// a Hugging Face index, or a directory holding either) and the index file
// itself: parsing and serializing model.safetensors.index.json. Apart from
// safetensors.cc, which holds the file format; the two share
// safetensors_internal.h.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/safetensors.h"
#include "server/checkpoint/safetensors_internal.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;
using safetensors_internal::FindField;
using safetensors_internal::Invalid;
using safetensors_internal::Json;
using safetensors_internal::OpenForReading;
using safetensors_internal::ParseJsonRejectingDuplicates;

absl::StatusOr<SafetensorsFile> OpenSafetensorsFile(
    const std::string& path, const FileAdmission& admit) {
  absl::StatusOr<ScopedFd> fd = OpenForReading(path, admit);
  if (!fd.ok()) return fd.status();
  absl::StatusOr<SafetensorsHeader> header =
      ReadSafetensorsHeader(fd->get(), path);
  if (!header.ok()) return header.status();
  return SafetensorsFile{path, *std::move(fd), *std::move(header)};
}

absl::StatusOr<std::string> ReadIndexFile(const std::string& path,
                                          const FileAdmission& admit) {
  absl::StatusOr<ScopedFd> fd = OpenForReading(path, admit);
  if (!fd.ok()) return fd.status();
  struct stat info;
  if (::fstat(fd->get(), &info) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  }
  if (info.st_size > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": an index of ", info.st_size, " bytes exceeds the limit of ",
        kMaxSafetensorsHeaderBytes));
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  if (absl::Status read = PreadFully(fd->get(), text.data(), info.st_size, 0);
      !read.ok()) {
    return Labelled(path, read);
  }
  return text;
}

// Opens the files an index names (each once, in name order, so that
// model-00001-of-... comes first) and checks each tensor is where the index
// says.
absl::StatusOr<SafetensorsCheckpoint> OpenIndexedCheckpoint(
    const std::string& index_path, const FileAdmission& admit) {
  absl::StatusOr<std::string> text = ReadIndexFile(index_path, admit);
  if (!text.ok()) return text.status();
  absl::StatusOr<SafetensorsIndex> index = ParseSafetensorsIndex(*text);
  if (!index.ok()) return Labelled(index_path, index.status());
  std::map<std::string, int> file_numbers;
  for (const auto& [tensor, file] : index->weight_map) file_numbers[file] = 0;
  SafetensorsCheckpoint checkpoint;
  const fs::path directory = fs::path(index_path).parent_path();
  for (auto& [file, number] : file_numbers) {
    number = static_cast<int>(checkpoint.files.size());
    absl::StatusOr<SafetensorsFile> opened =
        OpenSafetensorsFile((directory / file).string(), admit);
    if (!opened.ok()) return opened.status();
    checkpoint.files.push_back(*std::move(opened));
  }
  std::vector<std::map<absl::string_view, int>> entry_by_name(
      checkpoint.files.size());
  for (size_t f = 0; f < checkpoint.files.size(); ++f) {
    const auto& entries = checkpoint.files[f].header.entries;
    for (size_t e = 0; e < entries.size(); ++e) {
      entry_by_name[f][entries[e].name] = static_cast<int>(e);
    }
  }
  for (const auto& [tensor, file] : index->weight_map) {
    const int number = file_numbers.at(file);
    auto entry = entry_by_name[number].find(tensor);
    if (entry == entry_by_name[number].end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": maps tensor '", tensor, "' to ", file,
                       ", which has no such tensor"));
    }
    checkpoint.tensors.push_back({number, entry->second});
  }
  return checkpoint;
}

absl::StatusOr<SafetensorsCheckpoint> OpenSingleFileCheckpoint(
    const std::string& path, const FileAdmission& admit) {
  absl::StatusOr<SafetensorsFile> opened = OpenSafetensorsFile(path, admit);
  if (!opened.ok()) return opened.status();
  SafetensorsCheckpoint checkpoint;
  checkpoint.files.push_back(*std::move(opened));
  for (size_t e = 0; e < checkpoint.files[0].header.entries.size(); ++e) {
    checkpoint.tensors.push_back({0, static_cast<int>(e)});
  }
  return checkpoint;
}

// Resolves the path forms of the header comment in safetensors.h.
absl::StatusOr<SafetensorsCheckpoint> OpenCheckpointFiles(
    const std::string& path, const FileAdmission& admit) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint '", path, "' does not exist"));
  }
  if (error) {
    return absl::ErrnoToStatus(error.value(), absl::StrCat("stat ", path));
  }
  if (fs::is_directory(status)) {
    const fs::path index = fs::path(path) / std::string(kSafetensorsIndexName);
    if (fs::exists(index, error)) {
      return OpenIndexedCheckpoint(index.string(), admit);
    }
    std::vector<std::string> candidates;
    for (fs::directory_iterator it(path, error), end; !error && it != end;
         it.increment(error)) {
      if (it->path().extension() == ".safetensors") {
        candidates.push_back(it->path().string());
      }
    }
    if (error) {
      return absl::ErrnoToStatus(error.value(), absl::StrCat("list ", path));
    }
    if (candidates.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint directory '", path, "' has no ", kSafetensorsIndexName,
          " and ", candidates.size(),
          " .safetensors files (without an index exactly one is needed)"));
    }
    return OpenSingleFileCheckpoint(candidates[0], admit);
  }
  if (absl::EndsWith(path, ".json")) return OpenIndexedCheckpoint(path, admit);
  return OpenSingleFileCheckpoint(path, admit);
}

}  // namespace

absl::StatusOr<SafetensorsIndex> ParseSafetensorsIndex(absl::string_view json) {
  constexpr absl::string_view kWhat = "safetensors index";
  absl::StatusOr<Json> root = ParseJsonRejectingDuplicates(json, kWhat);
  if (!root.ok()) return root.status();
  SafetensorsIndex index;
  if (const Json* metadata = FindField(*root, "metadata")) {
    if (!metadata->is_object()) {
      return Invalid(kWhat, "field 'metadata' is not an object");
    }
    for (const auto& [key, value] : metadata->items()) {
      index.metadata[key] =
          value.is_string()
              ? value.get<std::string>()
              : value.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  }
  const Json* weight_map = FindField(*root, "weight_map");
  if (weight_map == nullptr || !weight_map->is_object()) {
    return Invalid(kWhat, "field 'weight_map' is missing or not an object");
  }
  for (const auto& [tensor, file] : weight_map->items()) {
    if (!file.is_string()) {
      return Invalid(kWhat, absl::StrCat("weight_map['", tensor,
                                         "'] is not a file name string"));
    }
    const std::string& name = file.get_ref<const std::string&>();
    if (name.empty() || name == "." || name == ".." ||
        name.find('/') != std::string::npos) {
      return Invalid(kWhat, absl::StrCat("weight_map['", tensor, "'] = '", name,
                                         "' is not a file name beside the "
                                         "index"));
    }
    index.weight_map.emplace_back(tensor, name);
  }
  return index;
}

std::string SerializeSafetensorsIndex(const SafetensorsIndex& index,
                                      int64_t total_bytes) {
  Json metadata = Json::object();
  metadata["total_size"] = total_bytes;
  for (const auto& [key, value] : index.metadata) {
    if (key != "total_size") metadata[key] = value;
  }
  Json weight_map = Json::object();
  for (const auto& [tensor, file] : index.weight_map) weight_map[tensor] = file;
  Json root = Json::object();
  root["metadata"] = std::move(metadata);
  root["weight_map"] = std::move(weight_map);
  return root.dump(2, ' ', /*ensure_ascii=*/false,
                   Json::error_handler_t::replace) +
         "\n";
}

absl::StatusOr<SafetensorsCheckpoint> OpenSafetensorsCheckpoint(
    const std::string& path, const FileAdmission& admit) {
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenCheckpointFiles(path, admit);
  if (!checkpoint.ok()) return checkpoint.status();
  std::stable_sort(
      checkpoint->tensors.begin(), checkpoint->tensors.end(),
      [&](const SafetensorsTensorRef& a, const SafetensorsTensorRef& b) {
        if (a.file != b.file) return a.file < b.file;
        return checkpoint->Entry(a).begin < checkpoint->Entry(b).begin;
      });
  for (size_t t = 0; t < checkpoint->tensors.size(); ++t) {
    checkpoint->by_name[checkpoint->Entry(checkpoint->tensors[t]).name] =
        static_cast<int>(t);
  }
  return checkpoint;
}

}  // namespace summon::server
