#!/usr/bin/env bash
# Issue 13's checks on a machine with a GPU, from what tests/gpu/pack.sh put
# in .gpu/: the CUDA tests (device statistics, watch statistics against the
# CPU kernel (issue 21), device buffers and CUDA IPC between processes,
# pinned streaming, the NCCL communicator), the end-to-end tests with every
# shard in device memory (SUMMON_TEST_DEVICE=cuda; watch_test: records
# reduced by the CUDA watch kernels), the PyTorch IPC proofs (tests/gpu/
# torch_ipc_check.py, torch_session_copy_check.py, weight_sync_ipc_check.py:
# ReadSlices into a CUDA tensor) and bench/gpu_bench.sh. Output: one block per check;
# the last line counts the failures.
set -uo pipefail
cd "$(dirname "$0")/../.."
G=$PWD/.gpu
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null ||
       dirname "$(find / -name libnccl.so.2 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$G/lib:$nccl:${LD_LIBRARY_PATH:-}
export TEST_TMPDIR=$(mktemp -d) TEST_SRCDIR=$G/srcdir
mkdir -p "$TEST_SRCDIR/summon/server/gpu" && cp "$G/bin/ipc_child" "$TEST_SRCDIR/summon/server/gpu/"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "libnccl from $nccl"
failed=0
run() {  # NAME COMMAND...
  echo "=== $1"
  shift
  "$@" || { echo "FAILED: $*"; failed=$((failed + 1)); }
}
for t in device_stats_test device_watch_test device_buffer_test pinned_streamer_test nccl_communicator_test; do
  run "$t" "$G/bin/$t" --gtest_brief=1
done
for t in device_placement_test writeback_matrix_test grads_test scope_test tensor_io_test watch_test; do
  run "$t (SUMMON_TEST_DEVICE=cuda)" env SUMMON_TEST_DEVICE=cuda "$G/bin/${t}_on_device" --gtest_brief=1
done
run "device_copies_test (SUMMON_TEST_DEVICE=cuda, 2 nodes x 2 ranks)" env SUMMON_TEST_DEVICE=cuda "$G/bin/device_copies_test" --gtest_brief=1
rm -rf client/python/summon/v1 && cp -r "$G/stubs_v1" client/python/summon/v1
run torch_ipc_check env PYTHONPATH=client/python python3 tests/gpu/torch_ipc_check.py --summond "$G/bin/summond"
run torch_session_copy_check env PYTHONPATH=client/python python3 tests/gpu/torch_session_copy_check.py --summond "$G/bin/summond"
run weight_sync_ipc_check env PYTHONPATH=client/python python3 tests/gpu/weight_sync_ipc_check.py --summond "$G/bin/summond"
run gpu_bench bash bench/gpu_bench.sh "$G/bin"
echo "run_on_gpu: $failed failed"
[ "$failed" -eq 0 ]
