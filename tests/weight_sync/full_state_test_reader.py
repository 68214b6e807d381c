"""A TEST reader: Client.read_slices's contract served from a full state dict
held in this process. It exists only to check pull's assembly against vLLM in
these tests; it is not summon's transfer (that is summond's ReadSlices, which
never builds a full tensor)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from summon.sync.pull import TORCH_DTYPES


class FullStateDictTestReader:
    """read_slices(model, version, entries) over {fqn: full tensor}: each
    box cut by narrow, converted to the entry's dtype as torch rounds (the
    daemon rounds to nearest even too), bfloat16 as uint16 bits."""

    def __init__(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        self.state_dict = state_dict
        self.requests = 0
        self.elements = 0

    def read_slices(self, model: str, version: int, entries: Sequence,
                    into: object = None) -> list[np.ndarray]:
        """`into` (a SliceBuffer) is ignored: fresh arrays, as a stream read."""
        self.requests += 1
        out = []
        for entry in entries:
            tensor = self.state_dict[entry.fqn]
            if len(entry.box) != tensor.dim():
                raise ValueError(f"{entry.fqn}: box {list(entry.box)} for a "
                                 f"{tensor.dim()}-d tensor")
            for dim, (start, length) in enumerate(entry.box):
                if start + length > tensor.shape[dim]:
                    raise ValueError(f"{entry.fqn}: box {list(entry.box)} outside "
                                     f"{tuple(tensor.shape)}")
                tensor = tensor.narrow(dim, start, length)
            tensor = tensor.to(TORCH_DTYPES[entry.dtype]).contiguous()
            self.elements += tensor.numel()
            if entry.dtype == "bfloat16":
                out.append(tensor.view(torch.int16).numpy().view(np.uint16))
            else:
                out.append(tensor.numpy())
        return out
