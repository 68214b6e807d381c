"""Pulling a TP rank's slices of a published version, and loading them.

    plan = summon.sync.plan_for(hf_config, tp_size=2, dtype="bfloat16")
    version = client.wait_version("policy", min_step=step, timeout=60)
    summon.sync.load_into(vllm_model,
                          summon.sync.pull(client, "policy", version, plan, tp_rank))

`pull` asks summond (Client.read_slices, the ReadSlices RPC) for exactly the
boxes of the rank's plan entries, converted by the daemon to the engine's
dtype, and assembles each engine parameter from them (cat, zero padding):
no full tensor is ever built, on either side. On the daemon's host the
daemon writes the slices straight into one shared-memory buffer of this
process's (summon.SliceBuffer), reused batch after batch; with a CUDA
`device` into one CUDA buffer of this process's instead, through CUDA IPC
(summon.cuda_slices: no host copy here; a daemon without that GPU is read
the usual way and the bytes copied in). `load_into` copies the results
into the parameters of a live vLLM model by name.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol, Sequence

import numpy as np
import torch

from summon.sync.plan import Entry, SyncPlan

from summon.slice_buffer import SliceBuffer
from summon.weight_sync_calls import SliceRequest

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16, "float64": torch.float64}
_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


def itemsize(dtype: str) -> int:
    """Bytes per element of a plan dtype."""
    return _ITEMSIZE[dtype]


class SliceReader(Protocol):
    """What pull reads through: summon.Client has this method."""

    def read_slices(self, model: str, version: int, entries: Sequence[SliceRequest],
                    into: Any = None, device: Any = None) -> list[Any]: ...


def _as_tensor(array: np.ndarray | torch.Tensor, dtype: str) -> torch.Tensor:
    """A read_slices array as a tensor of `dtype` (bfloat16 arrives as its
    uint16 bit pattern, NumPy having no bfloat16: reinterpreted, not converted;
    a CUDA read's tensors come typed)."""
    if isinstance(array, torch.Tensor):
        if array.dtype != TORCH_DTYPES[dtype]:
            raise ValueError(f"read_slices gave {array.dtype} for a {dtype} slice")
        return array
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if dtype == "bfloat16":
        return tensor.view(torch.int16).view(torch.bfloat16)
    if tensor.dtype != TORCH_DTYPES[dtype]:
        raise ValueError(f"read_slices gave {tensor.dtype} for a {dtype} slice")
    return tensor


def assemble(entry: Entry, pieces: Sequence[torch.Tensor],
             device: torch.device | str = "cpu") -> torch.Tensor:
    """The engine parameter of `entry` from its pieces' tensors (in order):
    concatenated along entry.cat_dim, zero rows appended, on `device`."""
    if len(pieces) != len(entry.pieces):
        raise ValueError(f"{entry.engine_name}: {len(pieces)} tensors for "
                         f"{len(entry.pieces)} pieces")
    parts = []
    for piece, tensor in zip(entry.pieces, pieces):
        if tuple(tensor.shape) != piece.shape:
            raise ValueError(f"{entry.engine_name}: piece {piece.fqn} came back "
                             f"{tuple(tensor.shape)}, its box is {piece.shape}")
        parts.append(tensor.to(device=device, dtype=TORCH_DTYPES[entry.dtype]))
    if entry.pad_rows:
        parts.append(torch.zeros((entry.pad_rows,) + entry.shape[1:],
                                 dtype=TORCH_DTYPES[entry.dtype], device=device))
    result = parts[0] if len(parts) == 1 else torch.cat(parts, dim=entry.cat_dim)
    # One piece may be a view of the packed reply: the engine gets its own.
    return result.contiguous() if len(parts) > 1 else result.clone()


def _packed_bytes(entry: Entry) -> int:
    """The entry's pieces in a ReadSlices answer, each 16-byte aligned."""
    return sum((p.numel * itemsize(entry.dtype) + 15) // 16 * 16 for p in entry.pieces)


def _batches(entries: Sequence[Entry], max_bytes: int) -> Iterator[list[Entry]]:
    batch: list[Entry] = []
    size = 0
    for entry in entries:
        nbytes = _packed_bytes(entry)
        if batch and size + nbytes > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(entry)
        size += nbytes
    if batch:
        yield batch


def pull(client: SliceReader, model: str, version: int, plan: SyncPlan, tp_rank: int,
         device: torch.device | str = "cpu", max_batch_bytes: int = 256 << 20,
         cuda_ipc: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Yields (engine name, tensor) for every entry of `plan` on `tp_rank`,
    in the engine's dtype on `device`, read from version `version` of `model`
    by ReadSlices calls of at most `max_batch_bytes` of slices each (an entry
    larger than that is one call), all answered into one buffer (each
    tensor yielded is the engine's own copy, so the buffer is reused): a
    SliceBuffer, or for a CUDA `device` (and `cuda_ipc`) one uint8 tensor on
    it that the daemon fills through CUDA IPC (Client.read_slices(device=))."""
    batches = list(_batches(plan.entries(tp_rank), max_batch_bytes))
    largest = max((sum(_packed_bytes(e) for e in b) for b in batches), default=0)
    if cuda_ipc and torch.device(device).type == "cuda":
        buffer = torch.empty(largest, dtype=torch.uint8, device=device)
        yield from _pull_batches(client, model, version, batches, buffer, device,
                                 read_device=device)
        return
    with SliceBuffer(largest) as host_buffer:
        yield from _pull_batches(client, model, version, batches, host_buffer, device)


def _pull_batches(client: SliceReader, model: str, version: int, batches: list[list[Entry]],
                  buffer: Any, device: torch.device | str, read_device: Any = None
                  ) -> Iterator[tuple[str, torch.Tensor]]:
    for batch in batches:
        requests = [SliceRequest(piece.fqn, list(piece.box), entry.dtype)
                    for entry in batch for piece in entry.pieces]
        if not requests:
            arrays = []
        elif read_device is not None:
            arrays = client.read_slices(model, version, requests, into=buffer,
                                        device=read_device)
        else:
            arrays = client.read_slices(model, version, requests, into=buffer)
        if len(arrays) != len(requests):
            raise ValueError(f"read_slices answered {len(arrays)} of {len(requests)} entries")
        at = 0
        for entry in batch:
            count = len(entry.pieces)
            tensors = [_as_tensor(a, entry.dtype) for a in arrays[at:at + count]]
            at += count
            yield entry.engine_name, assemble(entry, tensors, device)


def load_into(engine_model: torch.nn.Module, tensors: Iterable[tuple[str, torch.Tensor]],
              require_all: bool = True) -> set[str]:
    """Copies each (engine name, tensor) into the parameter of that name of a
    live vLLM model (its rank's slice, already fused and padded: no full
    tensor and no weight loader involved). Raises KeyError for a name the
    model lacks, ValueError for a shape or dtype that differs, and, with
    `require_all`, ValueError naming the parameters no tensor covered.
    Returns the names loaded."""
    params = dict(engine_model.named_parameters())
    loaded: set[str] = set()
    with torch.no_grad():
        for name, tensor in tensors:
            param = params.get(name)
            if param is None:
                raise KeyError(f"the engine model has no parameter {name!r}")
            if param.shape != tensor.shape or param.dtype != tensor.dtype:
                raise ValueError(f"{name}: the engine holds {tuple(param.shape)} "
                                 f"{param.dtype}, the plan gave {tuple(tensor.shape)} "
                                 f"{tensor.dtype}")
            param.data.copy_(tensor)
            loaded.add(name)
    if require_all:
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(f"the plan covers no tensor for {len(missing)} engine "
                             f"parameter(s): {', '.join(missing[:5])}")
    return loaded


def apply_plan(plan: SyncPlan, tp_rank: int, state_dict: dict[str, Any],
               device: torch.device | str = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """The plan applied to a full state dict held in this process (a
    reference for checks; summon's transfer is `pull`, which never holds one)."""
    for entry in plan.entries(tp_rank):
        parts = []
        for piece in entry.pieces:
            tensor = state_dict[piece.fqn]
            for dim, (start, length) in enumerate(piece.box):
                tensor = tensor.narrow(dim, start, length)
            parts.append(tensor)
        yield entry.engine_name, assemble(entry, parts, device)
