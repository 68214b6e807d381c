"""ReadSlices into this process's GPU memory through CUDA IPC
(weight_sync.proto, ReadSlicesRequest.cuda_buffer; docs/api.md#weight-sync).

    tensors = client.read_slices("gpt", v, entries, device="cuda:0")

The packed answer lands in one flat uint8 CUDA tensor (`into`, or a new one):
this process shares it with the daemon (torch's `_share_cuda_()`: the
cudaIpcMemHandle_t of its cudaMalloc block and its offset in it), and the
daemon copies each slice from its shards into it, host to device, with no
gRPC data messages and no host copy on this side. Each entry comes back as a
view of that tensor in its dtype (bfloat16 as torch.bfloat16), shaped like
its box.

Only a daemon on this host with the GPU can do it. A daemon that answers
FAILED_PRECONDITION "cuda_buffer: ..." (no CUDA device there, a caller on
another host, no CUDA delivery) is read the usual way (shared memory or the
stream) and the bytes copied into the same tensor, with the same views: the
caller gets the same result either way, and this client does not ask that
daemon again (`client.slice_deliveries` counts "cuda_buffer" reads apart).
A tensor from an expandable segment (PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:True) has no cudaIpcMemHandle_t: it is read the usual
way too.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch

from summon import dtypes
from summon.errors import SummonError
from summon.messages import ReadSlicesStats
from summon.v1 import weight_sync_pb2

IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_CUDA_MALLOC = ord("c")  # torch's handle type byte for a cudaMalloc block

TORCH_WIRE = {"float32": torch.float32, "float64": torch.float64,
              "float16": torch.float16, "bfloat16": torch.bfloat16,
              "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
              "int32": torch.int32, "int64": torch.int64}
_ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
_WIDEST = 8  # An entry of the stored dtype may be float64 at most.


def ipc_handle(torch_handle: bytes) -> Optional[bytes]:
    """The cudaIpcMemHandle_t in what `_share_cuda_()` returns: 64 bytes as
    they are (torch before versioned handles); a versioned one is a version
    byte, a type byte and, for a cudaMalloc block ('c'), the 64 bytes. None
    for any other (an expandable segment's, 'e')."""
    if len(torch_handle) == IPC_HANDLE_BYTES:
        return bytes(torch_handle)
    if len(torch_handle) == IPC_HANDLE_BYTES + 2 and torch_handle[1] == _CUDA_MALLOC:
        return bytes(torch_handle[2:])
    return None


def cuda_target(into: torch.Tensor) -> Optional[weight_sync_pb2.CudaIpcBuffer]:
    """The CudaIpcBuffer naming `into` (a contiguous uint8 CUDA tensor), or
    None when its memory has no cudaIpcMemHandle_t."""
    storage = into.untyped_storage()
    # (device, handle, storage bytes, storage offset in the block, ...).
    device, handle, _, block_offset, *_ = storage._share_cuda_()
    raw = ipc_handle(handle)
    if raw is None:
        return None
    return weight_sync_pb2.CudaIpcBuffer(
        device=device, ipc_handle=raw,
        offset=block_offset + into.storage_offset() * into.element_size(),
        bytes=into.numel() * into.element_size())


def packed_bound(entries: Sequence[Any]) -> int:
    """Bytes enough for the packed answer of `entries` (each 16-byte
    aligned): exact for entries that name a dtype, float64's size for
    those that keep the stored one (not known here)."""
    total = 0
    for entry in entries:
        numel = int(np.prod([length for _, length in entry.box], dtype=np.int64))
        size = numel * _ITEMSIZE.get(dtypes.name_of(dtypes.to_proto(entry.dtype)), _WIDEST)
        total += (size + 15) // 16 * 16
    return total


def _is_cuda_refusal(error: SummonError) -> bool:
    """The refusals weight_sync.proto says to answer through local_buffer or
    the stream instead."""
    return error.code == "FAILED_PRECONDITION" and error.message.startswith("cuda_buffer:")


def read_into(calls: Any, model: str, version: int, entries: Sequence[Any],
              into: torch.Tensor, target: Optional[weight_sync_pb2.CudaIpcBuffer]
              ) -> tuple[list[torch.Tensor], Any]:
    """Entries of version `version` as views of `into` (flat uint8): the
    daemon writes them there through `target` (None, or this client's
    daemon refused before: the usual read, copied in). Returns the views and
    ReadSlicesStats."""
    if into.dtype != torch.uint8 or into.dim() != 1 or not into.is_contiguous():
        raise ValueError("`into` must be a flat contiguous uint8 tensor")
    if target is not None and getattr(calls, "_cuda_slices", True):
        request = calls._slices_request(model, version, entries, local=False)
        request.cuda_buffer.CopyFrom(target)
        # The daemon's copies must not race this process's pending work on
        # the buffer (a previous batch still being read).
        if into.is_cuda:
            torch.cuda.current_stream(into.device).synchronize()
        try:
            header, stats = _call_into_cuda(calls, request)
        except SummonError as error:
            if not _is_cuda_refusal(error):
                raise
            calls._cuda_slices = False  # This daemon: the usual way from now on.
        else:
            calls.slice_deliveries["cuda_buffer"] += 1
            return _views(into, header.entries), stats
    arrays, stats, header = calls._read_host(model, version, entries, None, True)
    layouts = header.entries
    if header.total_bytes > into.numel():
        raise SummonError("INVALID_ARGUMENT", f"the CUDA buffer has {into.numel()} bytes; "
                          f"the answer needs {header.total_bytes}")
    for array, layout in zip(arrays, layouts):
        host = torch.from_numpy(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        into[layout.offset:layout.offset + layout.bytes].copy_(host)
    return _views(into, layouts), stats


def _call_into_cuda(calls: Any, request: Any) -> tuple[Any, Any]:
    """One ReadSlices into a CUDA buffer: the layout, then only the stats."""
    import grpc

    call = calls._summon.ReadSlices(request, timeout=calls.timeout, metadata=calls._metadata)
    header, stats = None, None
    try:
        for message in call:
            if header is None:
                header = message
            elif message.data:
                raise SummonError("INTERNAL", "ReadSlices streamed into a CUDA buffer")
            if message.HasField("stats"):
                stats = ReadSlicesStats(message.stats.slice_bytes, message.stats.peer_bytes,
                                        cuda_buffer=message.stats.cuda_buffer)
    except grpc.RpcError as error:
        raise SummonError.from_rpc(error) from None
    if header is None or stats is None or not stats.cuda_buffer:
        raise SummonError("DATA_LOSS", "ReadSlices ended without filling the CUDA buffer")
    return header, stats


def _views(into: torch.Tensor, layouts: Sequence[Any]) -> list[torch.Tensor]:
    views = []
    for layout in layouts:
        dtype = TORCH_WIRE[dtypes.name_of(layout.dtype)]
        view = into[layout.offset:layout.offset + layout.bytes].view(dtype)
        views.append(view.reshape(tuple(layout.shape)))
    return views
