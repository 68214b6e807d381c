#!/usr/bin/env bash
# summon with its shards in device memory beside the GPU anchors, in one run:
# bench/anchors/nccl_anchor (a raw NCCL all-gather of the same bytes over
# every visible GPU, and cudaMemcpy device-to-host into pageable and pinned
# memory, device to device, and GPU to GPU), then summon_bench --device cuda
# on one node with one rank per GPU (open = the shards copied device to
# device into the session's copy on the first GPU; read = pinned chunks to
# the host; close with writeback = device staging and a device commit).
#   bench/gpu_bench.sh [DIR holding summon_bench, nccl_anchor and anchor]
set -euo pipefail
bin=${1:-bazel-bin/bench}
anchor=$bin/nccl_anchor; [ -x "$anchor" ] || anchor=$bin/anchors/nccl_anchor
gpus=$(nvidia-smi -L | wc -l)
echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$anchor" --bytes=1048576,16777216,268435456 --iters=5
anchor_bin=$bin/anchor; [ -x "$anchor_bin" ] || anchor_bin=$bin/anchors/anchor
# A watch's CUDA statistics pass beside a device memcpy (issue 21).
[ -x "$bin/watch_gpu_bench" ] && "$bin/watch_gpu_bench" --iters=5
"$bin/summon_bench" --device=cuda --local_ranks="$gpus" --min_bytes=1048576 \
  --max_bytes=268435456 --iters=5 --compare --anchor_binary="$anchor_bin"
