"""The tiny model examples/torch_train.py trains, and its FSDP-style forward
on summon's shard views (GatherUnit, ShardedLM).

Kept apart from the launcher so each file holds one concern: what is trained
here, how it is launched, stopped and compared in torch_train.py.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils.stateless import functional_call
from torch.utils.checkpoint import checkpoint

import summon.torch as st

VOCAB, DIM, HEADS, SEQ, BATCH = 32, 16, 2, 8, 8


# The model ------------------------------------------------------------------


class Block(torch.nn.Module):
    # qkv has no bias: a key bias has a zero gradient (softmax ignores it), so
    # only rounding noise reaches it, and Adam would scale that noise up to
    # full-size steps that differ between any two summation orders.

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM, bias=False)  # see below
        self.proj = torch.nn.Linear(DIM, DIM)
        self.ln2 = torch.nn.LayerNorm(DIM)
        self.fc = torch.nn.Linear(DIM, 4 * DIM)
        self.out = torch.nn.Linear(4 * DIM, DIM)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, _ = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, HEADS, DIM // HEADS).unbind(2)
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (DIM // HEADS) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        h = h + self.proj(attn.transpose(1, 2).reshape(b, t, DIM))
        return h + self.out(F.gelu(self.fc(self.ln2(h))))


class TinyLM(torch.nn.Module):
    """Embedding, 2 blocks, final norm, head tied to the embedding."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        torch.nn.init.normal_(self.embed.weight, std=0.2)
        self.pos = torch.nn.Parameter(0.02 * torch.randn(SEQ, DIM))
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.ln_f = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch (inputs, targets); rank r trains rows r*B/W...

    Each row follows t -> (5t + 3) mod VOCAB from a random first token: a
    bigram rule the model learns within a few steps."""
    first = torch.randint(VOCAB, (BATCH, 1),
                          generator=torch.Generator().manual_seed(1000 + step))
    tokens = [first]
    for _ in range(SEQ):
        tokens.append((5 * tokens[-1] + 3) % VOCAB)
    sequence = torch.cat(tokens, dim=1)
    return sequence[:, :-1], sequence[:, 1:]


def make_optimizer(kind: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-2)
    return torch.optim.SGD(params, lr=0.3, momentum=0.9)


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


# FSDP-style training on summon's shards ----------------------------------------


class GatherUnit(torch.autograd.Function):
    """All-gathers a unit's flat shards; backward reduce-scatters the gradient
    (all_reduce + own chunk: torch 1.13's gloo has no reduce_scatter) averaged
    over the ranks, so every rank's shard gets the data-parallel mean."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, group_size: int,  # type: ignore[override]
                position: int) -> torch.Tensor:
        ctx.group_size, ctx.position = group_size, position
        full = shard.new_empty(group_size * shard.numel())
        dist.all_gather(list(full.chunk(group_size)), shard.detach())
        return full

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):  # type: ignore[override]
        grad_full = grad_full.contiguous()
        dist.all_reduce(grad_full)
        chunk = grad_full.numel() // ctx.group_size
        mine = grad_full.narrow(0, ctx.position * chunk, chunk) / ctx.group_size
        return mine, None, None


class ShardedLM:
    """TinyLM's forward computed from summon shard views, one unit at a time."""

    def __init__(self, module: TinyLM, views: st.ShardViews, strategy: str):
        self.module = module
        self.views = views
        self.regather_in_backward = strategy == "FULL_SHARD"
        # The shards themselves are the leaves autograd and the optimizer see:
        # their .grad is the rank's grads segment, so backward accumulates
        # straight into shared memory and the optimizer steps the shard in place.
        views.parameters()
        self.leaves = {view.unit: view.params for view in views if view.params.requires_grad}

    def unit_params(self, unit: str, shard: torch.Tensor, prefix: str = "") -> dict:
        view = self.views[unit]
        full = GatherUnit.apply(shard, view.shard.group_size, view.shard.position)
        return {fqn[len(prefix):]: t for fqn, t in view.unflatten(full).items()}

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        # The root unit stays gathered through the forward, as FSDP's root does.
        root = self.unit_params("", self.leaves[""])
        h = F.embedding(idx, root["embed.weight"]) + root["pos"][: idx.shape[1]]
        for i, block in enumerate(self.module.blocks):
            unit = f"blocks.{i}"

            def run(h: torch.Tensor, shard: torch.Tensor, unit=unit, block=block):
                return functional_call(block, self.unit_params(unit, shard, unit + "."), (h,))

            if self.regather_in_backward:  # FULL_SHARD: free now, gather again in backward
                h = checkpoint(run, h, self.leaves[unit], use_reentrant=True)
            else:                           # SHARD_GRAD_OP: keep it until backward
                h = run(h, self.leaves[unit])
        h = F.layer_norm(h, (DIM,), root["ln_f.weight"], root["ln_f.bias"],
                         self.module.ln_f.eps)
        return F.linear(h, root["head.weight"])
