"""The GPU proof of issue 13's IPC contract, run on a machine with a GPU.

A summond with --device cuda holds a seeded model's shards in device memory.
This PyTorch process maps rank 0's shards through CUDA IPC (summon.torch's
ShardViews over Trainer.MapShards), checks every element against the seeded
init and against a session read, changes the shards in place on the GPU, and
sees a new session read return the change; then a writeback made through a
session shows up in its CUDA tensors. Exact values throughout.

  tests/gpu/torch_ipc_check.py --summond bazel-bin/server/summond
Exit 0 when every check held; prints one line per check.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from gpu_checks import LAYOUT, SEED, SHAPES, Checks

import summon  # noqa: E402  (gpu_checks puts the package on the path)
from summon.local import LocalDaemon  # noqa: E402
from summon.torch import ShardViews  # noqa: E402
from seeded import seeded_float32  # noqa: E402

PARAMS = {fqn: int(np.prod(shape)) for fqn, shape in SHAPES.items()}
check = Checks("torch_ipc_check")


def read_all(client: summon.Client) -> dict[str, np.ndarray]:
    session = client.open_session("m", writeback=False)
    try:
        return {fqn: client.read_tensor(session.id, fqn).reshape(-1)
                for fqn in PARAMS}
    finally:
        client.close_session(session.id)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--summond", required=True)
    args = parser.parse_args()
    seeded = {fqn: seeded_float32(fqn, SEED, n) for fqn, n in PARAMS.items()}
    with LocalDaemon(local_ranks=1, binary=args.summond,
                     extra_args=["--device", "cuda"]) as daemon:
        client = summon.Client(daemon.address)
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        shard_map = client.map_shards("m", 0)
        check("MapShards names a device", shard_map.device_ordinal == 0,
              f"device_ordinal={shard_map.device_ordinal}, "
              f"handle {len(shard_map.params_ipc_handle)} bytes, "
              f"{shard_map.device_bytes} device bytes, header segment "
              f"{shard_map.segment_bytes} bytes")
        views = ShardViews(shard_map)
        layer = views["layers.0"]
        check("the IPC view is a CUDA tensor", layer.params.is_cuda,
              str(layer.params.device))
        for fqn, values in seeded.items():
            view = views["" if fqn == "embed.w" else "layers.0"].param_views[fqn]
            got = view.cpu().numpy()
            check(f"IPC view of {fqn} holds the seeded values", np.array_equal(got, values),
                  f"{got.size} elements")
        before = read_all(client)
        check("session read equals the seeded init",
              all(np.array_equal(before[f], seeded[f]) for f in PARAMS))

        with torch.no_grad():  # The trainer's "optimizer step", on the GPU.
            layer.params.mul_(2).add_(1)
        torch.cuda.synchronize()
        after = read_all(client)
        check("a session read returns the trainer's in-place GPU edit",
              np.array_equal(after["layers.0.w"], seeded["layers.0.w"] * 2 + 1) and
              np.array_equal(after["layers.0.b"], seeded["layers.0.b"] * 2 + 1) and
              np.array_equal(after["embed.w"], seeded["embed.w"]))

        session = client.open_session("m", scope="layers.0")
        new_bias = np.arange(256, dtype=np.float32) - 100
        client.write_tensor(session.id, "layers.0.b", new_bias)
        started = time.perf_counter()
        client.close_session(session.id)
        close_ms = (time.perf_counter() - started) * 1e3
        torch.cuda.synchronize()
        got = layer.param_views["layers.0.b"].cpu().numpy()
        check("a writeback lands in the trainer's CUDA tensor", np.array_equal(got, new_bias),
              f"close with writeback {close_ms:.1f} ms")
        check("the rest of the unit kept the edit",
              np.array_equal(layer.param_views["layers.0.w"].cpu().numpy(),
                             seeded["layers.0.w"] * 2 + 1))
        views._params_segment.close()
        client.delete_model("m")
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
