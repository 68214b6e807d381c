// The other process of device_buffer_test: opens a DeviceBuffer through its
// CUDA IPC handle (hex on the command line), checks that it holds float32
// seeded:7 values of "w", and doubles them in place. Exit 0 when all of that
// worked; the reason on stderr otherwise.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "core/seeded_init.h"
#include "server/gpu/device_buffer.h"

int main(int argc, char** argv) {
  using summon::server::gpu::IpcMappedBuffer;
  int device = 0;
  int64_t numel = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[1], &device) ||
      !absl::SimpleAtoi(argv[3], &numel)) {
    std::fprintf(stderr, "usage: ipc_child DEVICE HANDLE_HEX NUMEL\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<IpcMappedBuffer>> mapped =
      IpcMappedBuffer::Open(device, absl::HexStringToBytes(argv[2]));
  if (!mapped.ok()) {
    std::fprintf(stderr, "%s\n", mapped.status().ToString().c_str());
    return 1;
  }
  std::vector<float> values(static_cast<size_t>(numel));
  std::vector<float> expected(values.size());
  const int64_t bytes = numel * static_cast<int64_t>(sizeof(float));
  if (!summon::server::gpu::CopyFromDevice(device, (*mapped)->data(),
                                           values.data(), bytes)
           .ok() ||
      !summon::core::FillSeeded("w", 7, summon::core::DType::kFloat32, 0, numel,
                                expected.data())
           .ok()) {
    std::fprintf(stderr, "cannot read the shared buffer\n");
    return 1;
  }
  if (values != expected) {
    std::fprintf(stderr, "the shared buffer does not hold seeded:7 values\n");
    return 1;
  }
  for (float& value : values) value *= 2;
  if (!summon::server::gpu::CopyToDevice(device, (*mapped)->data(),
                                         values.data(), bytes)
           .ok()) {
    std::fprintf(stderr, "cannot write the shared buffer\n");
    return 1;
  }
  return 0;
}
