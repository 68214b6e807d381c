#!/usr/bin/env python3
"""torch.distributed's gloo all_gather of the same bytes as summon_bench's
gather: the glue a user would write instead of summon (issue 11, target P1).

    scripts/python bench/torch_gloo_allgather.py --world-size 4 --bytes 268435456

W processes on loopback, each contributing bytes / W float32s; prints the
median and min of --iters timed all_gathers (after one warmup), each after
a barrier, as rank 0 saw them.
"""

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, args, init_file, queue):
    dist.init_process_group("gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=args.world_size)
    per_rank = args.bytes // args.world_size // 4
    mine = torch.full((per_rank,), float(rank))
    out = [torch.empty(per_rank) for _ in range(args.world_size)]
    times = []
    for i in range(1 + args.iters):
        dist.barrier()
        start = time.perf_counter()
        dist.all_gather(out, mine)
        if i > 0:
            times.append((time.perf_counter() - start) * 1e6)
    assert all(out[r][0].item() == r for r in range(args.world_size))
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=256 << 20)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        context = mp.get_context("spawn")
        queue = context.Queue()
        processes = [context.Process(target=run,
                                     args=(r, args, init_file, queue))
                     for r in range(args.world_size)]
        for p in processes:
            p.start()
        times = queue.get()
        for p in processes:
            p.join()
    median = statistics.median(times)
    print(f"torch.distributed gloo all_gather W={args.world_size} "
          f"{args.bytes} bytes: median {median:.1f} us "
          f"({args.bytes / median / 1e3:.2f} GB/s), min {min(times):.1f} us "
          f"over {len(times)} iterations")


if __name__ == "__main__":
    main()
