#!/usr/bin/env bash
# Packs what tests/gpu/run_on_gpu.sh runs into .gpu/ (ignored by git): the
# GPU tests, summond, summonctl, the benches (stripped), every shared library
# they load except glibc's, libstdc++ and NCCL (a GPU machine with PyTorch
# has its own libnccl.so.2, and ours is 200 MB), and the Python stubs. For a
# machine with a GPU but no Bazel or gRPC (the device tool's): build here,
# carry .gpu, run tests/gpu/run_on_gpu.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(
  //server:summond //client:summonctl //bench:summon_bench
  //bench/anchors:nccl_anchor //bench/anchors:anchor //bench:watch_gpu_bench
  //server/gpu:device_stats_test //server/gpu:device_watch_test
  //server/gpu:device_buffer_test
  //server/gpu:ipc_child //server/gpu:pinned_streamer_test
  //server/comm:nccl_communicator_test
  //tests:writeback_matrix_test_on_device //tests:grads_test_on_device
  //tests:scope_test_on_device //tests:tensor_io_test_on_device
  //tests:device_placement_test_on_device //tests:watch_test_on_device
  //tests/cluster:device_copies_test
)
bazel build "${targets[@]}"
scripts/python -m summon._stubs
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
binaries=()
for target in "${targets[@]}"; do
  path=${target#//}; path=bazel-bin/${path/://}
  binaries+=("$path")
  cp "$path" .gpu/bin/
done
chmod u+w .gpu/bin/* && strip .gpu/bin/*
ldd "${binaries[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libnccl)\.so|ld-linux' |
  xargs -I{} cp -L {} .gpu/lib/
chmod u+w .gpu/lib/* && strip --strip-unneeded .gpu/lib/* 2>/dev/null || true
cp -r client/python/summon/v1 .gpu/stubs_v1
du -sh .gpu
