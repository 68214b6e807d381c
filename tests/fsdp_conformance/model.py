"""The conformance suite's model and wrapping: a tiny causal transformer.

Odd sizes on purpose (vocabulary 37, hidden 20) so that dim-0 chunks are
uneven and FSDP pads; the LM head is tied to the embedding (an alias in
summon's layout). The same seed builds the same model on every rank and in
every run, so two runs differ only by what the test changes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HIDDEN, HEADS, SEQ, BATCH = 37, 12, 20, 2, 6, 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, HEADS, DIM // HEADS).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp(x)


class TinyLM(nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batch(step: int, rank: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)


def loss_of(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def wrap(case: dict, world: int) -> nn.Module:
    """TinyLM wrapped as `case` says: api fsdp1/fsdp2 and their options; frozen
    (blocks.0.norm does not train), nested (each block's mlp a unit of its own)."""
    torch.manual_seed(case.get("seed", 0))
    model = TinyLM()
    if case.get("frozen"):  # frozen parameters beside trained ones in one unit
        model.blocks[0].norm.requires_grad_(False)
    if case["api"] == "fsdp1":
        return _wrap_fsdp1(model, case, world)
    return _wrap_fsdp2(model, case, world)


def _wrap_fsdp1(model: nn.Module, case: dict, world: int) -> nn.Module:
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    options: dict[str, Any] = {}
    strategy = ShardingStrategy[case.get("strategy", "FULL_SHARD")]
    if case.get("hybrid"):  # shard groups of `hybrid` consecutive ranks
        size = case["hybrid"]
        shard = [dist.new_group(list(range(s, s + size))) for s in range(0, world, size)]
        replicate = [dist.new_group(list(range(r, world, size))) for r in range(size)]
        rank = dist.get_rank()
        options["process_group"] = (shard[rank // size], replicate[rank % size])
    if case.get("mp"):
        options["mixed_precision"] = MixedPrecision(param_dtype=torch.bfloat16,
                                                    reduce_dtype=torch.float32)
    units = {Block, nn.Sequential} if case.get("nested") else {Block}  # nested: mlp too
    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy(units), sharding_strategy=strategy,
                use_orig_params=case.get("uop", True), device_id=torch.device("cpu"),
                **options)


def _wrap_fsdp2(model: nn.Module, case: dict, world: int) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Shard

    if case.get("hybrid"):
        size = case["hybrid"]
        mesh = init_device_mesh("cpu", (world // size, size),
                                mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    options: dict[str, Any] = {"mesh": mesh,
                               "reshard_after_forward": case.get("reshard", True)}
    if case.get("mp"):
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                    reduce_dtype=torch.float32)
    if case.get("dim1"):  # 2-D weights whose columns split evenly shard on dim 1
        options["shard_placement_fn"] = (
            lambda p: Shard(1) if p.ndim == 2 and p.shape[1] % world == 0 else Shard(0))
    for block in model.blocks:
        if case.get("nested"):
            fully_shard(block.mlp, **options)
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model
