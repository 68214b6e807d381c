"""A plain FSDP2 training job on the CPU that serves its full parameters through summon.

    bazel-bin/server/summond --insecure-local --listen 127.0.0.1:7071 --local-ranks 2 \
        --data-dir /tmp/summon-fsdp &
    export SUMMON_SERVER=127.0.0.1:7071 PYTHONPATH=$PWD/client/python
    torchrun --nproc-per-node 2 examples/fsdp2_train.py --steps 200

The lines marked `# summon` are everything summon adds to the FSDP2 script:
each rank's shards move into summond's memory and FSDP trains on them there.
While it runs, another process reads (or edits) the full parameters:

    summonctl session open gpt --scope blocks.0 --no-writeback   # between steps
    python3 examples/inspect_weights.py --model gpt --scope blocks.0

A second run with the same name resumes from summond's shards.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import summon.torch  # summon

VOCAB, DIM, HEADS, LAYERS, SEQ = 256, 64, 4, 4, 32


class Block(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS) -> None:
        super().__init__()
        self.dim, self.heads = dim, heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).transpose(1, 3).unbind(2)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True)
                          .transpose(1, 2).reshape(b, t, self.dim))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """A small GPT; bench/fsdp_overhead.py builds a larger one of the same shape."""

    def __init__(self, vocab: int = VOCAB, dim: int = DIM, heads: int = HEADS,
                 layers: int = LAYERS) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def arguments(default_name: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--name", default=default_name, help="the summon model")
    return parser.parse_args()


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    """A toy task: continue sequences that count up modulo VOCAB."""
    rank = dist.get_rank()
    data = torch.Generator().manual_seed(rank)
    start = time.monotonic()
    for step in range(1, steps + 1):
        first = torch.randint(0, VOCAB, (8, 1), generator=data)
        tokens = (first + torch.arange(SEQ + 1)) % VOCAB
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0 and (step % 20 == 0 or step == steps):
            print(f"step {step} loss {loss.item():.4f} "
                  f"({step / (time.monotonic() - start):.1f} steps/s)", flush=True)


def main() -> None:
    args = arguments("gpt")
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = GPT()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    served = summon.torch.serve(model, args.name, optimizer=optimizer)  # summon
    train(model, optimizer, args.steps)
    served.close()  # summon
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
