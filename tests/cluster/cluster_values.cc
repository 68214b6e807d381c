#include "tests/cluster/cluster_values.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "client/lib/wire_dtype.h"
#include "core/seeded_init.h"
#include "gtest/gtest.h"

namespace summon::tests {
namespace {

uint64_t Fnv1a(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char byte : bytes) {
    hash ^= static_cast<uint8_t>(byte);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The unit holding primary parameter `fqn`, and the parameter; nulls when
// there is none.
std::pair<const v1::Unit*, const v1::Parameter*> FindParameter(
    const v1::Model& model, const std::string& fqn) {
  for (const v1::Unit& unit : model.units()) {
    for (const v1::Parameter& param : unit.params()) {
      if (param.info().fqn() == fqn) return {&unit, &param};
    }
  }
  return {nullptr, nullptr};
}

TensorBytes SeededTensors(const v1::Model& model, uint64_t seed,
                          const std::string& suffix) {
  TensorBytes values;
  for (const v1::Unit& unit : model.units()) {
    for (const v1::Parameter& param : unit.params()) {
      values[param.info().fqn()] =
          SeededBytes(param.info().fqn() + suffix, param.info().numel(),
                      param.info().dtype(), seed);
    }
  }
  return values;
}

// FSDP2: what position `position` of a G-group stores of a parameter whose
// full bytes are `full`: torch.chunk along its shard dim, chunk `position`
// zero-padded to chunk 0's size, row-major (written from torch's
// _init_sharded_param, not from core/).
std::string Fsdp2PaddedChunk(const v1::Parameter& param,
                             const std::string& full, int group_size,
                             int position, int64_t element) {
  const auto& shape = param.info().shape();
  const int dim = param.shard_dim();
  const int64_t rows = (shape[dim] + group_size - 1) / group_size;
  int64_t outer = 1;
  int64_t inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (int d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  std::string chunk(static_cast<size_t>(outer * rows * inner * element), '\0');
  const int64_t owned =
      std::clamp<int64_t>(shape[dim] - position * rows, 0, rows);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(chunk.data() + o * rows * inner * element,
                full.data() +
                    (o * shape[dim] + position * rows) * inner * element,
                static_cast<size_t>(owned * inner * element));
  }
  return chunk;
}

}  // namespace

std::string SeededBytes(const std::string& fqn, int64_t numel, v1::DType dtype,
                        uint64_t seed) {
  const std::optional<core::DType> core_dtype = client::CoreDType(dtype);
  if (!core_dtype.has_value()) {
    ADD_FAILURE() << "no seeded init for dtype " << v1::DType_Name(dtype);
    return "";
  }
  std::string bytes(static_cast<size_t>(numel) * core::ElementSize(*core_dtype),
                    '\0');
  const absl::Status status =
      core::FillSeeded(fqn, seed, *core_dtype, 0, numel, bytes.data());
  EXPECT_TRUE(status.ok()) << status;
  return bytes;
}

std::vector<float> SeededFloats(const std::string& fqn, int64_t numel,
                                uint64_t seed) {
  return BytesToFloats(SeededBytes(fqn, numel, v1::DTYPE_FLOAT32, seed));
}

TensorBytes SeededModel(const v1::Model& model, uint64_t seed) {
  return SeededTensors(model, seed, "");
}

TensorBytes SeededGrads(const v1::Model& model, uint64_t seed) {
  return SeededTensors(model, seed, ".grad");
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

std::vector<float> BytesToFloats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<std::pair<std::string, int64_t>> PrimaryParams(
    const v1::Model& model) {
  std::vector<std::pair<std::string, int64_t>> params;
  for (const v1::Unit& unit : model.units()) {
    for (const v1::Parameter& param : unit.params()) {
      params.emplace_back(param.info().fqn(), param.info().numel());
    }
  }
  return params;
}

int OwningPosition(const v1::Model& model, const std::string& fqn,
                   int64_t index) {
  const auto [unit, param] = FindParameter(model, fqn);
  if (param == nullptr) {
    ADD_FAILURE() << "no parameter " << fqn;
    return -1;
  }
  return static_cast<int>((param->flat_offset() + index) / unit->chunk_numel());
}

ChecksumMap ParamChecksums(const v1::ModelChecksumResponse& response) {
  ChecksumMap sums;
  for (const v1::ShardChecksum& shard : response.shards()) {
    sums[{shard.rank(), shard.unit()}] = shard.params();
  }
  return sums;
}

ChecksumMap GradChecksums(const v1::ModelChecksumResponse& response) {
  ChecksumMap sums;
  for (const v1::ShardChecksum& shard : response.shards()) {
    if (shard.has_grads()) sums[{shard.rank(), shard.unit()}] = shard.grads();
  }
  return sums;
}

ChecksumMap ExpectedChecksums(const v1::Model& model, const TensorBytes& values,
                              const std::vector<int>& ranks) {
  std::vector<int> chosen = ranks;
  if (chosen.empty()) {
    for (int rank = 0; rank < model.world_size(); ++rank) {
      chosen.push_back(rank);
    }
  }
  ChecksumMap sums;
  for (const v1::Unit& unit : model.units()) {
    const int64_t element = client::ElementSize(unit.dtype());
    const int64_t chunk = unit.chunk_numel();
    for (int rank : chosen) {
      const int64_t first = (rank % model.group_size()) * chunk;
      std::string shard(static_cast<size_t>(chunk * element), '\0');
      for (const v1::Parameter& param : unit.params()) {
        auto it = values.find(param.info().fqn());
        if (it == values.end()) {
          ADD_FAILURE() << "no values for " << param.info().fqn();
          continue;
        }
        if (model.layout_kind() == v1::LAYOUT_KIND_FSDP2) {
          const std::string padded = Fsdp2PaddedChunk(
              param, it->second, model.group_size(),
              rank % model.group_size(), element);
          shard.replace(static_cast<size_t>(param.flat_offset() * element),
                        padded.size(), padded);
          continue;
        }
        // The part of [first, first + chunk) this parameter covers.
        const int64_t begin = std::max(first, param.flat_offset());
        const int64_t end =
            std::min(first + chunk, param.flat_offset() + param.info().numel());
        if (begin >= end) continue;
        std::memcpy(shard.data() + (begin - first) * element,
                    it->second.data() + (begin - param.flat_offset()) * element,
                    static_cast<size_t>((end - begin) * element));
      }
      sums[{rank, unit.fqn()}] = Fnv1a(shard);
    }
  }
  return sums;
}

int64_t SessionBufferBytes(const std::vector<int64_t>& tensor_bytes) {
  int64_t bytes = 0;
  for (int64_t size : tensor_bytes) bytes = (bytes + 63) / 64 * 64 + size;
  return bytes;
}

v1::SessionOptions ModuleScope(const std::string& fqn, bool recurse) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(fqn);
  options.mutable_module()->set_recurse(recurse);
  return options;
}

v1::SessionOptions ParamScope(const std::vector<std::string>& fqns) {
  v1::SessionOptions options;
  for (const std::string& fqn : fqns) options.mutable_params()->add_fqns(fqn);
  return options;
}

v1::SessionOptions ReadOnly(v1::SessionOptions options) {
  options.set_writeback(false);
  return options;
}

v1::SessionOptions Rank0Only(int home_rank, v1::SessionOptions options) {
  options.set_rank0_only(true);
  options.set_home_rank(home_rank);
  return options;
}

}  // namespace summon::tests
