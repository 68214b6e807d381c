"""A plain FSDP1 (FullyShardedDataParallel) job on the CPU that serves its full
parameters through summon; the model and the loop are fsdp2_train.py's.

    export SUMMON_SERVER=127.0.0.1:7071 PYTHONPATH=$PWD/client/python  # as there
    torchrun --nproc-per-node 2 examples/fsdp1_train.py --steps 200

The lines marked `# summon` are everything summon adds to the FSDP1 script.
"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

import summon.torch  # summon
from fsdp2_train import GPT, Block, arguments, train


def main() -> None:
    args = arguments("gpt1")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = FSDP(GPT(), auto_wrap_policy=ModuleWrapPolicy({Block}),
                 device_id=torch.device("cpu"), use_orig_params=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    served = summon.torch.serve(model, args.name, optimizer=optimizer)  # summon
    train(model, optimizer, args.steps)
    served.close()  # summon
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
