"""Accelerate serves a prepared model through summon: one call after prepare.

    model, optimizer = accelerator.prepare(model, optimizer)
    served = summon.integrations.accelerate.serve(accelerator, model, "llama",
                                                  optimizer=optimizer)
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from summon.serve import Served, serve as serve_fsdp


def serve(accelerator: Any, model: torch.nn.Module, name: str = "model", *,
          optimizer: Optional[Any] = None, **options: Any) -> Served:
    """Serves `model` (as `accelerator.prepare` returned it) as summon model `name`.

    optimizer: the prepared optimizer (accelerate's wrapper or the torch
    optimizer inside it); its step reports OPTIMIZER and IDLE. options go to
    summon.torch.serve. Refused with ValueError where accelerate did not
    shard with FSDP (its state's distributed type says which it chose).
    """
    from accelerate.utils import DistributedType

    kind = accelerator.state.distributed_type
    if kind != DistributedType.FSDP:
        raise ValueError(
            f"accelerate runs this job as {kind}, not FSDP: there is no shard for summon "
            "to serve. On a CPU accelerate falls back to DDP without a word even with an "
            "FSDP plugin (docs/api.md, Integrations)")
    inner = getattr(optimizer, "optimizer", optimizer)  # AcceleratedOptimizer
    return serve_fsdp(model, name, optimizer=inner, **options)
