"""torchtitan's real Trainer served through summon's documented hook, on a
machine with GPUs (issue 35). It has NEVER RUN: torchtitan's Trainer needs
CUDA, and no GPU run has had torchtitan's repository (its debugmodel's
tokenizer and c4_test data live there, not in the wheel) and its Trainer's
dependencies (datasets, torchdata, tensorboard, wandb: `pip install
torchtitan==0.3.0`, which the project's environment installs without them).

  cd TORCHTITAN_CHECKOUT   # tests/assets/tokenizer and tests/assets/c4_test
  python SUMMON/tests/gpu/torchtitan_check.py --summond SUMMON/bazel-bin/server/summond \
      --gpus 2

The outer process starts summond and runs itself under torchrun (one rank per
GPU); each rank builds torchtitan's llama3 debugmodel Trainer from its
config registry, serves `trainer.model_parts[0]` with `trainer.optimizers`
(docs/api.md, Integrations: torchtitan), trains, then checks: the model is
sharded by FSDP2 (DTensor Shard(0) where there are 2+ GPUs), a session
equals every parameter's full_tensor() bit for bit, the optimizer steps were
counted, and an edit through a session is what full_tensor() reads after.
Prints one line per check; exit 0 when every check held.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from gpu_checks import Checks

import summon  # noqa: E402  (gpu_checks puts the package on the path)
import summon.torch as st  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402

NAME = "titan-gpu"
STEPS = 4


def rank_main() -> int:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard
    from torchtitan.config import ConfigManager

    check = Checks(f"torchtitan_check rank {os.environ['RANK']}")
    config = ConfigManager().parse_args([
        "--module", "llama3", "--config", "llama3_debugmodel",
        "--training.steps", str(STEPS), "--dump-folder", os.environ["TITAN_DUMP"]])
    trainer = config.build()
    model = trainer.model_parts[0]
    # The hook (docs/api.md): after config.build(), before train().
    served = st.serve(model, NAME, optimizer=trainer.optimizers)
    trainer.train()
    world = dist.get_world_size()
    params = dict(model.named_parameters())
    check("every parameter is an FSDP2 DTensor, Shard(0)",
          all(isinstance(p, DTensor) and tuple(p.placements) == (Shard(0),)
              for p in params.values()))
    if world > 1:
        check("each rank holds less than the full tensor",
              all(p.to_local().shape[0] < p.shape[0] for p in params.values()
                  if p.shape[0] >= world))
    check(f"{STEPS} optimizer steps counted", served.steps == STEPS, str(served.steps))
    full = {n: p.full_tensor().cpu() for n, p in params.items()}
    client = served.client
    edited = "layers.0.feed_forward.w1.weight"
    dist.barrier()
    if dist.get_rank() == 0:
        with client.summon_full_params(NAME, writeback=False) as session:
            check("the session equals full_tensor() bit for bit, every parameter",
                  all(torch.equal(torch.from_numpy(session.read(n)), t) for n, t in full.items()))
        with client.summon_full_params(NAME) as session:
            session[edited] = session[edited] * 0.5 + 0.25
    dist.barrier()
    after = params[edited].full_tensor().cpu()
    check("an outside edit is what full_tensor() reads",
          torch.equal(after, full[edited] * 0.5 + 0.25))
    served.close()
    trainer.close()
    dist.destroy_process_group()
    return check.exit_code()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--summond", required=True)
    parser.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args()
    with LocalDaemon(local_ranks=args.gpus, binary=args.summond) as daemon:
        env = dict(os.environ, SUMMON_SERVER=daemon.address, TITAN_DUMP=daemon.data_dir,
                   TORCHTITAN_CHECK_RANK="1")
        code = subprocess.call([sys.executable, "-m", "torch.distributed.run",
                                f"--nproc-per-node={args.gpus}", os.path.abspath(__file__)],
                               env=env)
        summon.Client(daemon.address).delete_model(NAME)
    print(f"torchtitan_check: {'0' if code == 0 else 'some'} failed", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(rank_main() if os.environ.get("TORCHTITAN_CHECK_RANK") else main())
