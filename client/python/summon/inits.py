"""How a model's values start: CreateModel's InitMethod and GradientShards
from the Python arguments (`init="seeded:42"`, `grad_ranks="all"`)."""

from __future__ import annotations

from typing import Optional, Sequence, Union

from summon.v1 import summon_pb2, types_pb2

InitSpec = Union[None, str, int]


def init_method(init: InitSpec) -> Optional[types_pb2.InitMethod]:
    """None/"zeros", "seeded:SEED" (or an int seed), or "external"."""
    if init is None:
        return None
    if isinstance(init, int) and not isinstance(init, bool):
        return types_pb2.InitMethod(seeded=types_pb2.SeededInit(seed=init))
    text = str(init)
    if text == "zeros":
        return types_pb2.InitMethod(zeros=types_pb2.ZeroInit())
    if text == "external":
        return types_pb2.InitMethod(external=types_pb2.ExternalInit())
    if text.startswith("seeded:"):
        return types_pb2.InitMethod(seeded=types_pb2.SeededInit(seed=int(text[7:])))
    raise ValueError(f"init must be 'zeros', 'seeded:SEED' or 'external', got {init!r}")


def gradient_shards(grad_ranks: Union[None, str, Sequence[int]],
                    grad_init: InitSpec) -> Optional[summon_pb2.GradientShards]:
    if grad_ranks is None:
        if grad_init is not None:
            raise ValueError("grad_init needs grad_ranks: a model without "
                             "gradients has none to fill")
        return None
    ranks = [] if grad_ranks == "all" else [int(r) for r in grad_ranks]
    grads = summon_pb2.GradientShards(ranks=ranks)
    method = init_method(grad_init)
    if method is not None:
        grads.init.CopyFrom(method)
    return grads
