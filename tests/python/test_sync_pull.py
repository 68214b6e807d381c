"""summon.sync.pull through a real summond: a published version's slices,
for every TP rank, equal the plan applied to the model's full parameters
(which tests/weight_sync proves equal to what vLLM's load_weights holds).

Needs Client.read_slices (the ReadSlices RPC, issue 32's server part): the
test is skipped only where summon.Client has no read_slices.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import summon
import summon.sync
from seeded import seeded_float32

SEED = 7
COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=1, vocab_size=150, intermediate_size=96,
              tie_word_embeddings=False)
LLAMA = dict(COMMON, model_type="llama")
QWEN3_MOE = dict(COMMON, model_type="qwen3_moe", head_dim=16, num_experts=4,
                 moe_intermediate_size=24, decoder_sparse_step=1, mlp_only_layers=[])


def layout(plan: summon.sync.SyncPlan) -> dict:
    """One unit per decoder layer, the rest in the root unit, float32."""
    units: dict[str, list] = {}
    for fqn, shape in plan.sources.items():
        unit = ".".join(fqn.split(".")[:3]) if fqn.startswith("model.layers.") else ""
        units.setdefault(unit, []).append({"fqn": fqn, "shape": list(shape),
                                           "dtype": "float32"})
    return {"strategy": "FULL_SHARD",
            "units": [{"fqn": u, "params": p} for u, p in sorted(units.items())]}


def seeded_state(plan: summon.sync.SyncPlan) -> dict[str, torch.Tensor]:
    return {fqn: torch.from_numpy(seeded_float32(fqn, SEED, int(np.prod(shape)))
                                  .reshape(shape))
            for fqn, shape in plan.sources.items()}


@pytest.mark.parametrize("config, tp, dtype", [
    (LLAMA, 1, "float32"), (LLAMA, 2, "bfloat16"), (LLAMA, 4, "float32"),
    (QWEN3_MOE, 2, "bfloat16"),
])
def test_every_rank_pulls_its_plan_from_a_published_version(start_daemon, config, tp,
                                                            dtype) -> None:
    plan = summon.sync.plan_for(config, tp, dtype=dtype)
    state = seeded_state(plan)
    daemon = start_daemon(local_ranks=2)
    with summon.Client(daemon.address, timeout=30) as client:
        client.create_model("policy", layout(plan), init=f"seeded:{SEED}")
        version = client.publish("policy", 3)
        for rank in range(tp):
            pulled = dict(summon.sync.pull(client, "policy", version, plan, rank,
                                           max_batch_bytes=16 << 10))
            want = dict(summon.sync.apply_plan(plan, rank, state))
            assert pulled.keys() == want.keys()
            for name, tensor in want.items():
                assert pulled[name].dtype == tensor.dtype, name
                assert torch.equal(pulled[name], tensor), name
