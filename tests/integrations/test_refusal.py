"""serve refuses a model FSDP does not shard, before asking summond anything:
a framework's silent fallback to DDP must never look like success."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import summon.torch as st
from .conftest import base


@pytest.fixture(scope="module")
def group():
    """A gloo process group of one rank (DDP needs one)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(base.free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_plain_module_is_refused(group):
    with pytest.raises(ValueError, match=r"refuses a model that FSDP does not shard "
                                         r"\(Linear, no fully_shard"):
        st.serve(torch.nn.Linear(4, 4), "plain", client=None)


def test_ddp_model_is_refused(group):
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"refuses a model wrapped by "
                                         r"DistributedDataParallel: DDP keeps the whole model"):
        st.serve(model, "ddp", client=None)


def test_accelerate_without_fsdp_is_refused(group):
    """Accelerate that chose anything but FSDP (here one process: NO) is refused
    by the integration, naming the type accelerate chose."""
    from accelerate import Accelerator

    from summon.integrations.accelerate import serve
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"accelerate runs this job as .*, not FSDP"):
        serve(accelerator, model, "acc")
