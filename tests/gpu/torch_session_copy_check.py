"""The GPU check of session copies mapped over CUDA IPC (issue 13), run on a
machine with a GPU: a summond with --device cuda and two ranks holds a
seeded model; a PyTorch process opens a session's copy on its GPU
(summon.device_copy.DeviceSessionCopy over MapSession's device_copies),
checks every element against the seeded init, edits the full parameters in
place on the GPU inside a writable session, and sees the writeback reach the
shards. Exact values throughout.

  tests/gpu/torch_session_copy_check.py --summond bazel-bin/server/summond
Exit 0 when every check held; prints one line per check.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from gpu_checks import LAYOUT, SEED, SHAPES, Checks

import summon  # noqa: E402  (gpu_checks puts the package on the path)
from summon.device_copy import DeviceSessionCopy  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402
from seeded import seeded_float32  # noqa: E402

check = Checks("torch_session_copy_check")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--summond", required=True)
    args = parser.parse_args()
    seeded = {fqn: seeded_float32(fqn, SEED, int(np.prod(shape))).reshape(shape)
              for fqn, shape in SHAPES.items()}
    with LocalDaemon(local_ranks=2, binary=args.summond,
                     extra_args=["--device", "cuda"]) as daemon:
        client = summon.Client(daemon.address)
        client.create_model("m", LAYOUT, init=f"seeded:{SEED}")

        session = client.open_session("m", writeback=False)
        grant = client.grant_device_copies(session.id)
        check("the copy is listed per GPU with its ranks",
              len(grant.device_copies) == torch.cuda.device_count() or
              len(grant.device_copies) == 1,
              ", ".join(f"device {c.device} ranks {list(c.ranks)}"
                        for c in grant.device_copies))
        with DeviceSessionCopy(client, session.id, rank=0) as copy:
            check("the tensors are CUDA tensors of the parameters' shapes",
                  all(copy[f].is_cuda and tuple(copy[f].shape) == SHAPES[f] for f in SHAPES))
            for fqn, values in seeded.items():
                check(f"{fqn} on the GPU holds the seeded values",
                      np.array_equal(copy[fqn].cpu().numpy(), values))
        client.close_session(session.id)

        # Every GPU's copy edited alike (each rank's slice is written back
        # from the copy on its own GPU).
        session = client.open_session("m", scope="layers.0")
        for device_copy in client.grant_device_copies(session.id).device_copies:
            with DeviceSessionCopy(client, session.id, device=device_copy.device) as copy:
                with torch.no_grad():  # Full parameters edited on the GPU.
                    copy["layers.0.w"].mul_(2).add_(1)
                    copy["layers.0.b"].zero_()
                torch.cuda.synchronize()
        client.close_session(session.id)
        after = client.open_session("m", writeback=False)
        got = {fqn: client.read_tensor(after.id, fqn) for fqn in SHAPES}
        client.close_session(after.id)
        check("the writeback carried the GPU edits into every rank",
              np.array_equal(got["layers.0.w"], seeded["layers.0.w"] * 2 + 1) and
              np.array_equal(got["layers.0.b"], np.zeros(256, np.float32)))
        check("units outside the scope kept their values",
              np.array_equal(got["embed.w"], seeded["embed.w"]))
        client.delete_model("m")
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
