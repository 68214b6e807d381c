"""Device-placed shards (summond --device cuda) opened through CUDA IPC.

Trainer.MapShards names, for a device-placed rank, the GPU and a
cudaIpcMemHandle_t per allocation (params, grads). open_allocation() maps
one into this process and returns it as a flat uint8 CUDA tensor over the
daemon's memory (through __cuda_array_interface__, no copy), which
ShardViews slices into each unit's shard. Writes through it change the
shard itself, as writes through a /dev/shm mapping do on the host.

The memory is the daemon's: when the daemon exits it is gone (the model
comes back MISSING_SHARDS, with a new incarnation once reloaded), so a
trainer re-maps after any error from the daemon and compares incarnations.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Optional

import torch

_IPC_HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess


class _IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_BYTES)]


_cudart: Optional[ctypes.CDLL] = None


def _runtime() -> ctypes.CDLL:
    """The CUDA runtime torch itself loaded (or the system's)."""
    global _cudart
    if _cudart is not None:
        return _cudart
    torch.cuda.init()
    torch_dir = os.path.dirname(torch.__file__)
    candidates = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for pattern in (os.path.join(torch_dir, "lib", "libcudart*.so*"),
                    os.path.join(torch_dir, "..", "nvidia", "*", "lib", "libcudart.so*"),
                    os.path.join(torch_dir, "..", "nvidia", "cuda_runtime", "lib",
                                 "libcudart.so*")):
        candidates.extend(sorted(glob.glob(pattern)))
    errors = []
    for name in candidates:
        try:
            _cudart = ctypes.CDLL(name)
            return _cudart
        except OSError as error:
            errors.append(str(error))
    raise RuntimeError("no CUDA runtime library found: " + "; ".join(errors))


class _CudaArray:
    """A bare __cuda_array_interface__ over device bytes torch can wrap."""

    def __init__(self, pointer: int, size: int):
        self.__cuda_array_interface__ = {
            "shape": (size,), "typestr": "|u1", "data": (pointer, False),
            "version": 3, "strides": None}


class Allocation:
    """One opened IPC allocation; close() unmaps it (tensors over it die)."""

    def __init__(self, device: int, handle: bytes, size: int):
        if len(handle) != _IPC_HANDLE_BYTES:
            raise ValueError(f"a CUDA IPC handle has {_IPC_HANDLE_BYTES} bytes, "
                             f"got {len(handle)}")
        runtime = _runtime()
        runtime.cudaIpcOpenMemHandle.argtypes = [
            ctypes.POINTER(ctypes.c_void_p), _IpcMemHandle, ctypes.c_uint]
        runtime.cudaIpcOpenMemHandle.restype = ctypes.c_int
        self.device = device
        self._pointer = ctypes.c_void_p()
        with torch.cuda.device(device):
            torch.cuda.current_stream(device).synchronize()  # A live context.
            error = runtime.cudaIpcOpenMemHandle(
                ctypes.byref(self._pointer), _IpcMemHandle.from_buffer_copy(handle),
                _LAZY_ENABLE_PEER_ACCESS)
        if error != 0:
            raise RuntimeError(f"cudaIpcOpenMemHandle failed with CUDA error {error}")
        self.tensor = torch.as_tensor(_CudaArray(self._pointer.value, size),
                                      device=f"cuda:{device}")

    def close(self) -> None:
        if self._pointer.value:
            torch.cuda.synchronize(self.device)
            with torch.cuda.device(self.device):
                _runtime().cudaIpcCloseMemHandle(self._pointer)
            self._pointer = ctypes.c_void_p()


def open_allocation(device: int, handle: bytes, size: int) -> Optional[Allocation]:
    """The allocation behind `handle` on `device`; None for an empty handle."""
    if not handle:
        return None
    return Allocation(device, handle, size)


def flat_view(allocation: Optional[Allocation], dtype: torch.dtype,
              offset: Optional[int], numel: int) -> Optional[torch.Tensor]:
    """`numel` elements of `dtype` at byte `offset` of the allocation."""
    if offset is None or allocation is None and numel > 0:
        return None
    if numel == 0:
        return torch.empty(0, dtype=dtype, device="cuda")
    size = numel * torch.empty(0, dtype=dtype).element_size()
    return allocation.tensor[offset:offset + size].view(dtype)
