"""The GPU check of weight sync's CUDA IPC delivery (issue 32), run on a
machine with a GPU: a summond holds a seeded model and publishes a version;
this PyTorch process reads slices of it (rows, columns, bfloat16 and float64
conversions) into a CUDA tensor through ReadSlicesRequest.cuda_buffer (the
daemon opens the tensor's IPC handle and copies into it) and compares them
bit for bit with the same read over the gRPC stream; reads into a slice of a
larger tensor touch only the answer's bytes; a capacity past the
allocation's end is refused with nothing written; summon.sync.pull with a
CUDA device goes through it and equals pull on the CPU, loaded into a CUDA
module standing for the engine model.

  tests/gpu/weight_sync_ipc_check.py --summond bazel-bin/server/summond
Exit 0 when every check held; prints one line per check.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from gpu_checks import LAYOUT, SEED, Checks

import summon  # noqa: E402  (gpu_checks puts the package on the path)
import summon.sync  # noqa: E402
from summon import SliceRequest, cuda_slices  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402
from summon.sync.plan import Entry, Piece, SyncPlan  # noqa: E402

check = Checks("weight_sync_ipc_check")
ENTRIES = [
    SliceRequest("embed.w", [(100, 37), (0, 64)]),                 # rows
    SliceRequest("layers.0.w", [(0, 256), (40, 24)]),              # columns
    SliceRequest("layers.0.b", [(3, 101)], "bfloat16"),            # 202 bytes, a gap
    SliceRequest("layers.0.w", [(17, 5), (200, 56)], "float64"),   # widened
]


def as_bytes(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's bytes on the host (bfloat16 included)."""
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).cpu().numpy()


def same(got: list[torch.Tensor], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        tuple(g.shape) == w.shape and np.array_equal(as_bytes(g), w.reshape(-1).view(np.uint8))
        for g, w in zip(got, want))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--summond", required=True)
    args = parser.parse_args()
    device = "cuda:0"
    with LocalDaemon(local_ranks=2, binary=args.summond) as daemon:
        client = summon.Client(daemon.address, timeout=60)
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")
        client.publish("m", 3)
        streamed, _ = client.read_slices_with_stats("m", 3, ENTRIES, local=False)

        tensors, stats = client.read_slices_with_stats("m", 3, ENTRIES, device=device)
        check("the daemon wrote into the CUDA tensor (no data messages)",
              stats.cuda_buffer and client.slice_deliveries["cuda_buffer"] == 1,
              f"deliveries {dict(client.slice_deliveries)}, {stats}")
        check("the slices are CUDA tensors of the boxes' shapes and dtypes",
              all(t.is_cuda for t in tensors) and
              [t.dtype for t in tensors] == [torch.float32, torch.float32,
                                             torch.bfloat16, torch.float64],
              ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in tensors))
        check("cuda_buffer bytes equal the stream's bit for bit", same(tensors, streamed))

        # Into a slice of a larger tensor: the IPC offset is the slice's.
        base = torch.full((1 << 16,), 0xAB, dtype=torch.uint8, device=device)
        into = base[4096:4096 + 32768]
        tensors = client.read_slices("m", 3, ENTRIES, into=into, device=device)
        total = max(t.storage_offset() * t.element_size() + t.numel() * t.element_size()
                    for t in tensors) - 4096
        host = base.cpu().numpy()
        check("into a slice: the answer at the slice's offset, bit for bit",
              same(tensors, streamed) and client.slice_deliveries["cuda_buffer"] == 2)
        check("nothing written before the slice or after the answer",
              (host[:4096] == 0xAB).all() and (host[4096 + total:] == 0xAB).all(),
              f"answer {total} bytes")

        # A capacity beyond the allocation: refused by the daemon, untouched.
        before = base.cpu().numpy()
        target = cuda_slices.cuda_target(into)
        target.bytes = 1 << 40
        try:
            cuda_slices.read_into(client, "m", 3, ENTRIES, into, target)
            check("a capacity past the allocation is refused", False, "it was read")
        except summon.SummonError as error:
            check("a capacity past the allocation is refused",
                  error.code == "INVALID_ARGUMENT" and "pass the end of the shared CUDA "
                  "allocation" in error.message, f"{error.code}: {error.message}")
        check("... with nothing written", np.array_equal(base.cpu().numpy(), before))

        # summon.sync.pull onto the GPU, against pull on the CPU.
        plan = SyncPlan(tp_size=1, sources={"layers.0.w": (256, 256), "embed.w": (1000, 64)},
                        ranks=[[
                            Entry("w", [Piece("layers.0.w", ((0, 128), (0, 256)))],
                                  (128, 256), "bfloat16"),
                            Entry("e", [Piece("embed.w", ((0, 1000), (0, 64)))],
                                  (1000, 64), "float32")]])
        deliveries = client.slice_deliveries["cuda_buffer"]
        on_gpu = dict(summon.sync.pull(client, "m", 3, plan, 0, device=device,
                                       max_batch_bytes=1 << 16))
        on_cpu = dict(summon.sync.pull(client, "m", 3, plan, 0, max_batch_bytes=1 << 16))
        check("pull(device='cuda:0') reads through cuda_buffer",
              client.slice_deliveries["cuda_buffer"] == deliveries + 2,
              f"deliveries {dict(client.slice_deliveries)}")
        check("pull onto the GPU equals pull on the CPU bit for bit",
              set(on_gpu) == {"w", "e"} and all(
                  on_gpu[k].is_cuda and torch.equal(on_gpu[k].cpu(), on_cpu[k])
                  for k in on_cpu))
        engine = torch.nn.Module()
        engine.w = torch.nn.Parameter(torch.zeros(128, 256, dtype=torch.bfloat16,
                                                  device=device))
        engine.e = torch.nn.Parameter(torch.zeros(1000, 64, device=device))
        summon.sync.load_into(engine, summon.sync.pull(client, "m", 3, plan, 0,
                                                       device=device))
        check("load_into a CUDA model from a cuda_buffer pull",
              torch.equal(engine.w.detach().cpu(), on_cpu["w"]) and
              torch.equal(engine.e.detach().cpu(), on_cpu["e"]))
        client.delete_model("m")
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
