// Multiplies every element of a float32/float64 .npy file by a factor: the
// demo's stand-in for "edit a tensor in your own tool".
//
//   npy_scale IN.npy OUT.npy FACTOR

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "client/files/npy.h"

namespace {

template <typename T>
void Scale(std::string& data, double factor) {
  for (size_t at = 0; at + sizeof(T) <= data.size(); at += sizeof(T)) {
    T value;
    std::memcpy(&value, data.data() + at, sizeof(T));
    value = static_cast<T>(value * factor);
    std::memcpy(data.data() + at, &value, sizeof(T));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: npy_scale IN.npy OUT.npy FACTOR\n";
    return 2;
  }
  auto array = summon::client::ReadNpyFile(argv[1]);
  if (!array.ok()) {
    std::cerr << array.status() << "\n";
    return 1;
  }
  const double factor = std::atof(argv[3]);
  switch (array->dtype) {
    case summon::core::DType::kFloat32:
      Scale<float>(array->data, factor);
      break;
    case summon::core::DType::kFloat64:
      Scale<double>(array->data, factor);
      break;
    default:
      std::cerr << "npy_scale handles float32 and float64 arrays\n";
      return 1;
  }
  if (absl::Status status = summon::client::WriteNpyFile(argv[2], *array);
      !status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  return 0;
}
