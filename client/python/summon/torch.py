"""summon.torch: PyTorch on summon, in one import.

Two ways for a training job to keep its shards in summond:

- a hand-written sharded loop: `register` a model's layout, `attach` a
  `Trainer` to its ranks, map `ShardViews` and bracket each step with
  `Step` (summon/trainer.py);
- a real FSDP job (`fully_shard`, `FullyShardedDataParallel`): one call,
  `serve(model, name, optimizer=...)`, rebinds FSDP's shards to summond's
  and reports the phases from hooks (summon/serve.py, summon/fsdp.py).

This module only gathers the two; serve builds on the trainer, never the
other way round.
"""

from summon.dcp import load_dcp, save_dcp
from summon.serve import Served, serve
from summon.trainer import (TORCH_DTYPES, ExternalWriteCallback, ShardViews, Step,
                            Trainer, UnitView, attach, layout_from_module,
                            named_parameters_with_ties, register, torch_dtype)

__all__ = [
    "ExternalWriteCallback",
    "Served",
    "ShardViews",
    "Step",
    "TORCH_DTYPES",
    "Trainer",
    "UnitView",
    "attach",
    "layout_from_module",
    "load_dcp",
    "named_parameters_with_ties",
    "register",
    "save_dcp",
    "serve",
    "torch_dtype",
]
