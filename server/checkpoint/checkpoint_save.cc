// Saving a sharded model as a safetensors checkpoint, durably: plan the
// files (the same plan on every node), create them under temporary names,
// let each writer pwrite its ranks' slices, then rename them into place and
// sync the directory; or abandon the temporaries. Files are created and
// renamed only relative to directories vetted by the admission (R20). Apart
// from checkpoint_load.cc, which reads checkpoints; the two share only
// checkpoint_internal.h.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/checkpoint_internal.h"
#include "server/checkpoint/safetensors.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;
using checkpoint_internal::CheckRanks;

// Per shard position, the lowest of `ranks` holding it, or -1 for none; with
// `designated_only` only a position's designated writer (its lowest global
// rank) counts, so each position has one writer in the whole cluster.
absl::StatusOr<std::vector<int>> WritersAmong(const core::ModelSpec& model,
                                              const std::vector<int>& ranks,
                                              bool designated_only) {
  if (absl::Status checked = CheckRanks(model, ranks); !checked.ok()) {
    return checked;
  }
  std::vector<int> writers(model.groups.group_size, -1);
  for (int rank : std::set<int>(ranks.begin(), ranks.end())) {
    int& writer = writers[model.groups.PositionOf(rank)];
    if (writer < 0 &&
        (!designated_only || model.groups.ReplicasOf(rank).front() == rank)) {
      writer = rank;
    }
  }
  return writers;
}

int64_t TensorBytes(const core::FlatParamEntry& param) {
  return param.numel * static_cast<int64_t>(core::ElementSize(param.dtype));
}

// The primaries in model order, cut into files of at most `max_file_bytes`
// tensor bytes; a tensor larger than that gets a file of its own.
std::vector<std::vector<core::ParamLocation>> SplitIntoFiles(
    const core::ModelSpec& model, int64_t max_file_bytes) {
  std::vector<std::vector<core::ParamLocation>> files(1);
  int64_t file_bytes = 0;
  for (size_t u = 0; u < model.units.size(); ++u) {
    const auto& params = model.units[u].layout.params();
    for (size_t p = 0; p < params.size(); ++p) {
      const int64_t bytes = TensorBytes(params[p]);
      if (!files.back().empty() && bytes > max_file_bytes - file_bytes) {
        files.emplace_back();
        file_bytes = 0;
      }
      files.back().push_back({static_cast<int>(u), static_cast<int>(p)});
      file_bytes += bytes;
    }
  }
  return files;
}

PlannedCheckpointFile PlanFile(std::string path, std::string head,
                               int64_t size) {
  std::string temp_path = absl::StrCat(path, kCheckpointPartialSuffix);
  return {std::move(path), std::move(temp_path), std::move(head), size};
}

absl::StatusOr<ScopedFd> OpenFile(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  return ScopedFd(fd);
}

absl::Status Fsync(const ScopedFd& fd, const std::string& path) {
  if (::fsync(fd.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fsync ", path));
  }
  return absl::OkStatus();
}

// The directory holding `path`, opened (symlinks in its path followed) and
// vetted by `admit`: creates and renames go relative to it, so no symlink
// swapped into the path afterwards redirects them.
absl::StatusOr<ScopedFd> OpenDirectoryOf(const std::string& path,
                                         const FileAdmission& admit) {
  std::string directory = fs::path(path).parent_path().string();
  if (directory.empty()) directory = ".";
  absl::StatusOr<ScopedFd> fd = OpenFile(directory, O_RDONLY | O_DIRECTORY);
  if (!fd.ok() || admit == nullptr) return fd;
  if (absl::Status admitted = admit(fd->get(), directory); !admitted.ok()) {
    return admitted;
  }
  return fd;
}

std::string BaseName(const std::string& path) {
  return fs::path(path).filename().string();
}

// Creates `file.temp_path` afresh, sized to the whole file with `file.head`
// at its start, and fsyncs it. Whatever had the name (a stale temporary, or
// a symlink planted at this predictable name to make the daemon write
// elsewhere) is unlinked, never followed: O_EXCL creates a new file or
// fails, even if something is planted again in between.
absl::Status CreateDurably(const PlannedCheckpointFile& file,
                           const FileAdmission& admit) {
  absl::StatusOr<ScopedFd> directory = OpenDirectoryOf(file.temp_path, admit);
  if (!directory.ok()) return directory.status();
  const std::string name = BaseName(file.temp_path);
  if (::unlinkat(directory->get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("unlink ", file.temp_path));
  }
  const int created =
      ::openat(directory->get(), name.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (created < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("create ", file.temp_path));
  }
  absl::StatusOr<ScopedFd> fd = ScopedFd(created);
  if (::ftruncate(fd->get(), file.size) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("ftruncate ", file.temp_path));
  }
  if (absl::Status put = PwriteFully(fd->get(), file.head.data(),
                                     static_cast<int64_t>(file.head.size()), 0);
      !put.ok()) {
    return Labelled(file.temp_path, put);
  }
  return Fsync(*fd, file.temp_path);
}

// Opens a temporary tensor file the leader created, after checking that it
// starts with the header this node planned (which fixes every offset and
// the size): a node that planned another model or metadata would put its
// bytes in the wrong places.
absl::StatusOr<ScopedFd> OpenCreated(const PlannedCheckpointFile& file,
                                     const FileAdmission& admit) {
  absl::StatusOr<ScopedFd> fd = OpenFile(file.temp_path, O_RDWR | O_NOFOLLOW);
  if (!fd.ok()) return fd;
  if (admit != nullptr) {
    if (absl::Status admitted = admit(fd->get(), file.temp_path);
        !admitted.ok()) {
      return admitted;
    }
  }
  std::string head(file.head.size(), '\0');
  if (!PreadFully(fd->get(), head.data(), static_cast<int64_t>(head.size()), 0)
           .ok() ||
      head != file.head) {
    return absl::FailedPreconditionError(
        absl::StrCat(file.temp_path,
                     " does not start with the header this node planned: "
                     "was it planned with another model or metadata?"));
  }
  return fd;
}

// Pwrites every slice of the positions with a writer (a rank, not -1) from
// that rank's shard into the created files, then fsyncs them.
absl::StatusOr<int64_t> WriteSlices(const CheckpointFiles& plan,
                                    const core::ModelSpec& model,
                                    const std::vector<int>& writers,
                                    const core::ShardAddress& shard) {
  std::vector<ScopedFd> fds;
  fds.reserve(plan.files.size());
  for (const PlannedCheckpointFile& file : plan.files) {
    absl::StatusOr<ScopedFd> fd = OpenCreated(file, plan.admit);
    if (!fd.ok()) return fd.status();
    fds.push_back(*std::move(fd));
  }
  int64_t bytes_written = 0;
  for (const PlannedCheckpointTensor& tensor : plan.tensors) {
    const core::FlatParamLayout& layout =
        model.units[tensor.location.unit].layout;
    const int64_t element_size =
        static_cast<int64_t>(core::ElementSize(layout.dtype()));
    for (int position = 0; position < layout.group_size(); ++position) {
      const core::ShardSlice slice =
          layout.SliceOf(tensor.location.param, position);
      if (writers[position] < 0 || !slice.in_shard) continue;
      const uint8_t* source = shard(writers[position], tensor.location.unit);
      absl::Status put;
      // One pwrite per run (an FSDP2 chunk on a dim > 0 is strided).
      core::ForEachRun(
          slice, [&](int64_t intra, int64_t in_shard, int64_t numel) {
            if (!put.ok()) return;
            put = PwriteFully(fds[tensor.file].get(),
                              source + in_shard * element_size,
                              numel * element_size,
                              tensor.data_offset + intra * element_size);
          });
      if (!put.ok()) {
        return Labelled(
            absl::StrCat(plan.files[tensor.file].temp_path, " tensor '",
                         model.Param(tensor.location).fqn, "'"),
            put);
      }
      bytes_written += slice.numel_in_shard * element_size;
    }
  }
  for (size_t f = 0; f < fds.size(); ++f) {
    if (absl::Status synced = Fsync(fds[f], plan.files[f].temp_path);
        !synced.ok()) {
      return synced;
    }
  }
  return bytes_written;
}

absl::Status RenameIntoPlace(const PlannedCheckpointFile& file,
                             const FileAdmission& admit,
                             SavedCheckpoint& saved) {
  absl::StatusOr<ScopedFd> directory = OpenDirectoryOf(file.path, admit);
  if (!directory.ok()) return directory.status();
  if (::renameat(directory->get(), BaseName(file.temp_path).c_str(),
                 directory->get(), BaseName(file.path).c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("rename ", file.temp_path));
  }
  saved.files.push_back(file.path);
  saved.bytes_written += file.size;
  return absl::OkStatus();
}

// Makes the renames into `directory` durable.
absl::Status SyncDirectory(const std::string& directory) {
  const std::string name = directory.empty() ? "." : directory;
  absl::StatusOr<ScopedFd> fd = OpenFile(name, O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) return fd.status();
  return Fsync(*fd, name);
}

}  // namespace

absl::StatusOr<CheckpointFiles> PlanCheckpoint(
    const std::string& path, const core::ModelSpec& model,
    const std::map<std::string, std::string>& metadata, int64_t max_file_bytes,
    const FileAdmission& admit) {
  if (max_file_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the file size cap must be >= 1 (--max-file-bytes N, "
                     "max_file_bytes), got ",
                     max_file_bytes));
  }
  std::map<std::string, std::string> file_metadata = metadata;
  file_metadata.emplace("format", "pt");
  const bool single_file = absl::EndsWith(path, ".safetensors");
  const std::vector<std::vector<core::ParamLocation>> files =
      SplitIntoFiles(model, single_file ? std::numeric_limits<int64_t>::max()
                                        : max_file_bytes);

  CheckpointFiles plan;
  plan.admit = admit;
  plan.directory = single_file ? fs::path(path).parent_path().string() : path;
  SafetensorsIndex index;
  index.metadata = file_metadata;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string name =
        single_file ? std::string()
                    : absl::StrFormat("model-%05d-of-%05d.safetensors", f + 1,
                                      files.size());
    SafetensorsHeader header;
    header.metadata = file_metadata;
    int64_t data_bytes = 0;
    for (const core::ParamLocation& location : files[f]) {
      const core::FlatParamEntry& param = model.Param(location);
      const int64_t bytes = TensorBytes(param);
      header.entries.push_back({param.fqn, param.dtype, param.shape,
                                param.numel, data_bytes, data_bytes + bytes});
      data_bytes += bytes;
      index.weight_map.emplace_back(param.fqn, name);
    }
    std::string head = SerializeSafetensorsHeader(header);
    const int64_t data_start = static_cast<int64_t>(head.size());
    for (size_t t = 0; t < files[f].size(); ++t) {
      plan.tensors.push_back({files[f][t], static_cast<int>(f),
                              data_start + header.entries[t].begin});
    }
    plan.files.push_back(
        PlanFile(single_file ? path : (fs::path(path) / name).string(),
                 std::move(head), data_start + data_bytes));
    plan.tensor_bytes += data_bytes;
  }
  if (!single_file) {
    std::string text = SerializeSafetensorsIndex(index, plan.tensor_bytes);
    const int64_t size = static_cast<int64_t>(text.size());
    plan.index =
        PlanFile((fs::path(path) / std::string(kSafetensorsIndexName)).string(),
                 std::move(text), size);
  }
  return plan;
}

absl::Status CreateCheckpointFiles(const CheckpointFiles& plan) {
  if (plan.index.has_value()) {
    std::error_code error;
    fs::create_directories(plan.directory, error);
    if (error) {
      return absl::ErrnoToStatus(error.value(),
                                 absl::StrCat("mkdir ", plan.directory));
    }
  }
  for (const PlannedCheckpointFile& file : plan.files) {
    if (absl::Status created = CreateDurably(file, plan.admit); !created.ok()) {
      return created;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WriteCheckpointRanges(const CheckpointFiles& plan,
                                              const core::ModelSpec& model,
                                              const std::vector<int>& ranks,
                                              const core::ShardAddress& shard) {
  absl::StatusOr<std::vector<int>> writers =
      WritersAmong(model, ranks, /*designated_only=*/true);
  if (!writers.ok()) return writers.status();
  return WriteSlices(plan, model, *writers, shard);
}

absl::StatusOr<SavedCheckpoint> CommitCheckpointFiles(
    const CheckpointFiles& plan) {
  // Every byte of the tensor files is durable already: CreateCheckpointFiles
  // fsynced the headers, each writer the ranges it wrote (on a shared
  // filesystem only the writing node can flush its own writes).
  SavedCheckpoint saved;
  for (const PlannedCheckpointFile& file : plan.files) {
    if (absl::Status renamed = RenameIntoPlace(file, plan.admit, saved);
        !renamed.ok()) {
      return renamed;
    }
  }
  if (plan.index.has_value()) {
    if (absl::Status created = CreateDurably(*plan.index, plan.admit);
        !created.ok()) {
      return created;
    }
    if (absl::Status renamed = RenameIntoPlace(*plan.index, plan.admit, saved);
        !renamed.ok()) {
      return renamed;
    }
  }
  if (absl::Status synced = SyncDirectory(plan.directory); !synced.ok()) {
    return synced;
  }
  return saved;
}

void AbandonCheckpointFiles(const CheckpointFiles& plan) {
  for (const PlannedCheckpointFile& file : plan.files) {
    ::unlink(file.temp_path.c_str());
  }
  if (plan.index.has_value()) ::unlink(plan.index->temp_path.c_str());
}

absl::StatusOr<SavedCheckpoint> SaveCheckpoint(
    const std::string& path, const core::ModelSpec& model,
    const std::vector<int>& ranks, const core::ShardAddress& shard,
    const std::map<std::string, std::string>& metadata, int64_t max_file_bytes,
    const FileAdmission& admit) {
  absl::StatusOr<CheckpointFiles> plan =
      PlanCheckpoint(path, model, metadata, max_file_bytes, admit);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<int>> writers =
      WritersAmong(model, ranks, /*designated_only=*/false);
  if (!writers.ok()) return writers.status();
  for (size_t position = 0; position < writers->size(); ++position) {
    if ((*writers)[position] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks [", absl::StrJoin(ranks, ", "),
                       "] hold no copy of shard position ", position,
                       ": saving needs every position of the shard group"));
    }
  }
  absl::StatusOr<SavedCheckpoint> saved =
      [&]() -> absl::StatusOr<SavedCheckpoint> {
    if (absl::Status created = CreateCheckpointFiles(*plan); !created.ok()) {
      return created;
    }
    if (absl::StatusOr<int64_t> written =
            WriteSlices(*plan, model, *writers, shard);
        !written.ok()) {
      return written.status();
    }
    return CommitCheckpointFiles(*plan);
  }();
  if (!saved.ok()) AbandonCheckpointFiles(*plan);
  return saved;
}

}  // namespace summon::server
