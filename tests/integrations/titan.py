"""torchtitan's own Llama3 (its `debugmodel` flavor) sharded by its own
`parallelize_llama` over gloo, served by summon after `parallelize` (the
hook docs/api.md gives for a torchtitan train script), trained by
torchtitan's own OptimizersContainer (worker.py runs it: mode `torchtitan`).

torchtitan's Trainer does not run on a CPU (it sets a CUDA device first:
"Found no NVIDIA driver on your system"); this file builds the model the way
its Trainer.__init__ does (model config, sharding config, meta build,
parallelize_fn, to_empty, init_weights) and makes three CPU-only
workarounds, test code only (tests/gpu/torchtitan_check.py runs the real
Trainer with none of them):
  - ParallelDims builds its meshes on torchtitan's `device_type`, which is
    "cuda" when no accelerator is present: set to "cpu";
  - attention: FlexAttention, torchtitan's default, fails in backward on a
    CPU ("FlexAttention does not support backward on CPU"), varlen runs
    flash attention (CUDA only), and `get_attention_config("sdpa")` refuses
    ("sdpa is no longer supported for language models"): each layer's inner
    attention is swapped for torchtitan's ScaledDotProductAttention, the way
    its own graph_trainer tests do;
  - parallelize_llama sets FSDP's gradient divide factor to 1.0, which FSDP
    reduces with ReduceOp.PREMUL_SUM(1.0), and gloo has none ("Cannot use
    ReduceOp.PREMUL_SUM with Gloo"): every FSDP module is told to reduce with
    SUM (set_force_sum_reduction_for_comms), the same values for a factor 1.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

import summon
import summon.torch as st

STEPS = 3
EDIT_AFTER = 2
EDITED = "layers.0.feed_forward.w1.weight"
SEQ = 16
_parallel_dims: Any = None


def build(world: int) -> tuple[torch.nn.Module, Any, Any]:
    """(model, optimizers, spmd context) as torchtitan's Trainer builds them."""
    import torchtitan.distributed.parallel_dims as parallel_dims_module
    from torch.distributed.fsdp import FSDPModule
    from torchtitan.components.optimizer import default_adamw
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import model_registry
    from torchtitan.models.llama3.sharding import set_llama3_sharding_config

    parallel_dims_module.device_type = "cpu"  # CPU-only workaround (module docstring)
    spec = model_registry("debugmodel", attn_backend="flex")
    config = spec.model
    for layer in config.layers:  # CPU-only workaround (module docstring)
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    parallelism = ParallelismConfig()  # torchtitan's defaults: FSDP over every rank
    # One ParallelDims per process, as the Trainer makes: its meshes are the
    # ones spmd_types keeps as current, and the second run must shard on them.
    global _parallel_dims
    if _parallel_dims is None:
        _parallel_dims = ParallelDims.from_config(parallelism, world)
        _parallel_dims.build_mesh()
    parallel_dims = _parallel_dims
    dist_utils.set_spmd_backend(parallelism.spmd_backend)
    # What Llama3Model.Config.update_from_config does for a parallelism config.
    set_llama3_sharding_config(config, enable_sp=parallelism.enable_sequence_parallel)
    with torch.device("meta"):
        model = config.build()
    model = spec.parallelize_fn(model, parallel_dims=parallel_dims, training=TrainingConfig(),
                                parallelism=parallelism, compile_config=CompileConfig(),
                                ac_config=None, dump_folder="/tmp")
    for module in model.modules():  # CPU-only workaround (module docstring)
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()
    # The debugmodel's own optimizer (llama3's config registry), but not its
    # "fused" implementation, which torchtitan documents as "CUDA only".
    optimizer_config = default_adamw(lr=8e-4)
    optimizer_config.implementation = "for-loop"
    optimizers = optimizer_config.build(model_parts=[model])
    context = dist_utils.get_spmd_context(parallel_dims=parallel_dims)
    return model, optimizers, (context, parallel_dims)


def batch(step: int, rank: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(100 * step + rank)
    return torch.randint(0, 2048, (2, SEQ + 1), generator=generator)


def run(case: dict, client: summon.Client, serve: bool, helpers: Any) -> dict:
    """helpers: worker.py (sharding, full_params, the two edits, phase_of)."""
    from torchtitan.distributed.spmd_types import annotate_input_spmd_types
    model, optimizers, (context, parallel_dims) = build(dist.get_world_size())
    record: dict = {"sharding": helpers.sharding(model), "phases": []}
    # The hook: serve what parallelize returned, with torchtitan's optimizers.
    served = (st.serve(model, case["name"], client=client, optimizer=optimizers)
              if serve else None)
    rank = dist.get_rank()
    for step in range(1, STEPS + 1):
        tokens = batch(step, rank)
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        positions = torch.arange(SEQ).expand(inputs.shape[0], SEQ)
        with context():
            inputs, labels, extra = annotate_input_spmd_types(
                parallel_dims, inputs, labels, {"positions": positions})
            logits = model(inputs, **extra)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                     labels.flatten())
            loss.backward()
        optimizers.step()
        optimizers.zero_grad()
        if served is not None:
            record["phases"].append(helpers.phase_of(client, case["name"], served))
        if step == EDIT_AFTER:
            if serve:
                helpers.edit_through_summon(client, case["name"], EDITED)
            else:
                helpers.edit_through_fsdp(model, EDITED)
    if served is not None:
        served.close()
    record["params"] = helpers.full_params(model)
    return record
